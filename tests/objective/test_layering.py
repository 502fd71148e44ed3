"""The objective is pure torch: importing it pulls in no trainer, no model library, no other sagerl layer."""

import subprocess
import sys


def test_objective_imports_no_trainer_or_other_layer():
    code = (
        "import sys, sagerl.objective; "
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('trl', 'transformers', 'verl', 'accelerate', "
        "'datasets', 'peft', 'vllm') or (m.startswith('sagerl.') and not m.startswith('sagerl.objective'))); "
        "print(','.join(bad))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == "", f"sagerl.objective imported: {out}"
