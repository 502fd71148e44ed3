"""Two lighteval custom tasks over the JSONL files beside this file, 8 samples per problem: ``toy`` (6 problems)
with pass@k for k = 1, 4, 8 and avg@n; ``toy_b`` (4 problems) with pass@k for k = 2 only."""

from pathlib import Path

from lighteval.metrics.metrics import Metrics
from lighteval.tasks.lighteval_task import LightevalTaskConfig
from lighteval.tasks.requests import Doc

HERE = Path(__file__).resolve().parent


def toy_prompt(line, task_name: str = None):
    return Doc(task_name=task_name, query=line["problem"], choices=[line["answer"]], gold_index=0)


def _task(name: str, folder: str, metrics: list) -> LightevalTaskConfig:
    return LightevalTaskConfig(
        name=name,
        prompt_function=toy_prompt,
        hf_repo=str(HERE / folder),
        hf_subset="default",
        hf_avail_splits=["test"],
        evaluation_splits=["test"],
        few_shots_split=None,
        few_shots_select=None,
        generation_size=32,
        metrics=metrics,
        version=0,
    )


toy = _task(
    "toy",
    "data",
    [
        Metrics.pass_at_k_math(sample_params={"k": 1, "n": 8}),
        Metrics.pass_at_k_math(sample_params={"k": 4, "n": 8}),
        Metrics.pass_at_k_math(sample_params={"k": 8, "n": 8}),
        Metrics.avg_at_n_math(sample_params={"n": 8}),
    ],
)
toy_b = _task("toy_b", "data_b", [Metrics.pass_at_k_math(sample_params={"k": 2, "n": 8})])

TASKS_TABLE = [toy, toy_b]
