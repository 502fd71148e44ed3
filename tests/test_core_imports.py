"""The core installs without an engine: sagerl.objective and sagerl.grading work with every engine import blocked.

pyproject.toml keeps transformers/TRL/accelerate/datasets (the ``trl`` extra) and verl (the ``verl`` extra) out
of the core dependencies, so the objective and the grading must not need them. A meta-path finder that
raises on those packages stands in for an environment where they are absent.
"""

import subprocess
import sys

BLOCKED = ("trl", "transformers", "accelerate", "datasets", "peft", "gguf", "safetensors", "verl", "vllm")

CODE = f"""
import sys

class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {BLOCKED!r}:
            raise ImportError(f"blocked: {{name}}")
        return None

sys.meta_path.insert(0, Block())
import torch
torch.set_num_threads(1)
import sagerl.grading
import sagerl.objective
from sagerl.objective import branch_guide, sage_loss

entropy = torch.tensor([[0.5, 2.2, 3.0]])
q = branch_guide(entropy, torch.ones(1, 3), gamma=0.3, tau=1.2)
out = sage_loss(torch.zeros(1, 3), None, torch.zeros(1, 3), torch.ones(1), torch.ones(1, 3), log_q=q.log(), beta=0.1)
print(q.tolist(), float(out.loss))
print(sagerl.grading.extract_boxed("so \\\\boxed{{42}}"))
"""


def test_objective_and_grading_import_without_any_engine():
    result = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    q_line, boxed = result.stdout.strip().splitlines()
    # q = clamp(1 + 0.3·(H − 1.2)+, 0.6, 1.4): 1, 1.3, 1.4 (clamped from 1.54)
    assert q_line.startswith("[[1.0, 1.2999999523162842, 1.399999976158142]]")
    # on-policy with logp = ref_logp = 0: ρ = 1, surrogate −A = −1; k3(π, q·π_ref) = q − log q − 1 per token
    import math

    kl = sum(v - math.log(v) - 1 for v in (1.0, 1.3, 1.4)) / 3
    assert abs(float(q_line.split()[-1]) - (-1.0 + 0.1 * kl)) < 1e-6
    assert boxed == "42"


def test_the_blocker_really_blocks():
    code = CODE.split("import torch")[0] + "import transformers\n"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode != 0 and "blocked: transformers" in result.stderr
