"""Every TRL recipe (recipes/trl/run.sh) builds, on CPU, the config it would train with on 8 GPUs.

For each variant, size and vLLM mode: the printed ``accelerate launch`` command parses with accelerate's
own parser, its accelerate/DeepSpeed config file parses (accelerate's ``ClusterConfig``, DeepSpeed keys
that its launcher knows, a ``DeepSpeedPlugin`` built from them); the ``sagerl train`` part runs with
``--dry-run`` and a tiny model substituted (plus ``use_cpu``, since bf16 needs it without a GPU), which
builds the full ``SAGEConfig``, loads the model's config and tokenizer and the training set; the batch
arithmetic fits the launch's process count; in server mode the ``trl vllm-serve`` command parses with
TRL's parser and its port and GPUs match the trainer's. Neither deepspeed nor vllm is needed; nothing
trains (the recipes run on GPUs only).
"""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml

from sagerl.cli import main

RUN = Path(__file__).resolve().parents[2] / "recipes" / "trl" / "run.sh"
VARIANTS = ("grpo", "grpo+branch", "bnpo", "bnpo+branch", "dapo", "dapo+branch")
SIZES = {"7b": "zero3", "3b": "zero2", "1.5b": "zero2"}
ROLLOUTS = 8
PROMPTS_PER_STEP = 64  # 512 completions per optimizer step, 2 optimizer steps per rollout


def recipe_commands(variant: str, size: str, mode: str, model: Path) -> list[list[str]]:
    env = dict(os.environ, DRY_RUN="1", MODEL=str(model), OUT="runs/recipe-test")
    done = subprocess.run(
        ["bash", str(RUN), variant, size, mode], env=env, capture_output=True, text=True, check=True
    )
    return [shlex.split(line) for line in done.stdout.splitlines() if line.strip()]


def without_env(command: list[str]) -> tuple[dict[str, str], list[str]]:
    """(``env`` assignments, the command after them)."""
    if command[0] != "env":
        return {}, command
    i = 1
    while "=" in command[i]:
        i += 1
    return dict(item.split("=", 1) for item in command[1:i]), command[i:]


def check_accelerate_config(path: Path, zero_stage: int) -> int:
    """Parse an accelerate config as ``accelerate launch`` does; return its number of processes."""
    from accelerate.commands.config.config_args import ClusterConfig
    from accelerate.commands.launch import launch_command_parser
    from accelerate.utils import DeepSpeedPlugin, DistributedType

    config = ClusterConfig.from_yaml_file(str(path))
    assert config.distributed_type == DistributedType.DEEPSPEED
    assert config.mixed_precision == "bf16" and config.num_machines == 1
    ds = dict(config.deepspeed_config)
    launcher_args = {action.dest for action in launch_command_parser()._actions}
    assert set(ds) <= launcher_args, set(ds) - launcher_args  # accelerate would ignore an unknown key
    assert ds["zero_stage"] == zero_stage
    ds.pop("deepspeed_multinode_launcher")
    plugin = DeepSpeedPlugin(**ds)
    assert plugin.deepspeed_config["zero_optimization"]["stage"] == zero_stage
    assert plugin.deepspeed_config["gradient_accumulation_steps"] == "auto"  # from the trainer's config
    return config.num_processes


@pytest.mark.parametrize("mode", ["colocate", "server"])
@pytest.mark.parametrize("size", list(SIZES))
@pytest.mark.parametrize("variant", VARIANTS)
def test_recipe_builds(variant, size, mode, tiny_model, capsys):
    from accelerate.commands.launch import launch_command_parser

    commands = recipe_commands(variant, size, mode, tiny_model)
    assert len(commands) == (2 if mode == "server" else 1)
    train_env, train = without_env(commands[-1])

    assert train[:2] == ["accelerate", "launch"]
    launch = launch_command_parser().parse_args(train[2:])
    assert launch.module and launch.training_script == "sagerl.cli"
    config_file = Path(launch.config_file)
    assert config_file.name == f"{SIZES[size]}.yaml"
    processes = check_accelerate_config(config_file, int(SIZES[size][-1]))
    if launch.num_processes is not None:  # vLLM server mode trains on fewer GPUs
        processes = launch.num_processes

    sagerl_args = launch.training_script_args
    assert sagerl_args[:3] == ["train", "--preset", variant]
    main([*sagerl_args, "--dry-run", "--set", "use_cpu=true", "--set", "limit=64"])
    record = yaml.safe_load(capsys.readouterr().out)
    assert record["preset"] == variant and record["run"]["model"] == str(tiny_model)
    assert record["run"]["dataset"] == "math_lvl3to5"
    args = record["trainer_all_fields"]

    # the paper's settings (from the presets) and the recipe's
    assert (args["num_generations"], args["temperature"], args["epsilon"]) == (ROLLOUTS, 1.0, 0.2)
    assert (args["epsilon_high"] or args["epsilon"]) == (0.28 if variant.startswith("dapo") else 0.2)
    guided = variant.endswith("+branch")
    assert args["guide"] == ("branch" if guided else "none")
    assert args["beta"] == (0.05 if guided or variant == "grpo" else 0.0)
    assert (args["gamma"], args["tau"], args["q_min"], args["q_max"]) == (0.3, 1.2, 0.6, 1.4)
    assert args["advantage_estimator"] == ("bnpo" if variant.startswith("bnpo") else None)
    assert args["dynamic_sampling"] is variant.startswith("dapo")
    assert (args["learning_rate"], args["max_completion_length"]) == (1e-6, 3072)
    assert args["bf16"] and args["gradient_checkpointing"] and args["use_vllm"]
    assert args["vllm_mode"] == mode

    # batch arithmetic on the launch's processes: 64 prompts x 8 per optimizer step, 2 steps per rollout
    per_step = args["per_device_train_batch_size"] * processes * args["gradient_accumulation_steps"]
    assert per_step == PROMPTS_PER_STEP * ROLLOUTS
    assert args["steps_per_generation"] == 2 * args["gradient_accumulation_steps"]
    training_gpus = train_env.get("CUDA_VISIBLE_DEVICES", "0,1,2,3,4,5,6,7").split(",")
    assert len(training_gpus) == processes

    if mode == "server":
        from trl.scripts.vllm_serve import build_command, make_parser

        server_env, server = without_env(commands[0])
        assert server[:2] == ["trl", "vllm-serve"]
        (script_args,) = make_parser().parse_args_and_config(args=server[2:])
        assert script_args.model == str(tiny_model)
        assert script_args.max_model_len == args["vllm_max_model_length"] == 4096
        assert (script_args.host, script_args.port) == (args["vllm_server_host"], args["vllm_server_port"])
        server_gpus = server_env["CUDA_VISIBLE_DEVICES"].split(",")
        assert script_args.data_parallel_size * script_args.tensor_parallel_size == len(server_gpus)
        assert set(server_gpus).isdisjoint(training_gpus) and len(server_gpus) + len(training_gpus) == 8
        assert "--data-parallel-size" in build_command(script_args)  # what TRL hands to vLLM


def test_unknown_variant_or_size_is_refused(tiny_model):
    env = dict(os.environ, DRY_RUN="1")
    for args, message in ((["grpo+typo"], "unknown variant"), (["grpo", "70b"], "unknown size")):
        done = subprocess.run(["bash", str(RUN), *args], env=env, capture_output=True, text=True)
        assert done.returncode == 2 and message in done.stderr
