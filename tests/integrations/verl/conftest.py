"""verl's tests run in .venv-verl (``make test`` builds it); the main suite, without verl, skips this folder."""

import importlib.util
import os
import socket

import pytest

if importlib.util.find_spec("verl") is None:
    collect_ignore_glob = ["*.py"]


@pytest.fixture(scope="session")
def gloo_cpu():
    """One-process gloo group and verl's CPU platform, for verl's FSDP2 actor on this machine.

    VERL_ENGINE_DEVICE=cuda: verl registers its FSDP engine for cuda and npu only; on the CPU platform
    that engine runs unchanged.
    """
    import torch
    import torch.distributed as dist
    from verl_cpu import use_cpu_platform

    torch.set_num_threads(1)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
    env["VERL_ENGINE_DEVICE"] = "cuda"
    saved = {key: os.environ.get(key) for key in env}
    os.environ.update(env)
    use_cpu_platform()
    dist.init_process_group("gloo", rank=0, world_size=1)
    yield
    dist.destroy_process_group()
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
