"""Make lighteval write a results file and its details for the toy evaluation of this folder, offline:
``python make_results.py OUTPUT_DIR`` in an environment with lighteval (README.md beside ../ says which).

lighteval's Registry imports every built-in task module, and some reach the network at import (the MT-Bench
judge lists hub models); this script gives the Registry this folder's custom tasks only. The rest is lighteval's
own code: its Pipeline with a custom model (toy_model.py, no weights), its pass@k and avg@n metrics, and its
EvaluationTracker writing results/<model>/results_<date>.json and details/<model>/<date>/*.parquet.
"""

import sys
from pathlib import Path

from lighteval.logging.evaluation_tracker import EvaluationTracker
from lighteval.models.custom.custom_model import CustomModelConfig
from lighteval.pipeline import ParallelismManager, Pipeline, PipelineParameters
from lighteval.tasks.registry import Registry

HERE = Path(__file__).resolve().parent


def custom_only(custom_tasks=None, load_multilingual=False):
    return Registry._extract_configs(Registry.create_custom_tasks_module(custom_tasks))


Registry.load_all_task_configs = staticmethod(custom_only)

tracker = EvaluationTracker(output_dir=sys.argv[1], save_details=True)
pipeline = Pipeline(
    tasks="toy|0,toy_b|0",
    pipeline_parameters=PipelineParameters(
        launcher_type=ParallelismManager.CUSTOM, custom_tasks_directory=str(HERE / "toy_task.py")
    ),
    evaluation_tracker=tracker,
    model_config=CustomModelConfig(
        model_name="toy-model", model_definition_file_path=str(HERE / "toy_model.py")
    ),
)
pipeline.evaluate()
pipeline.show_results()
pipeline.save_and_push_results()
