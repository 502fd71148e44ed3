"""glibc's malloc keeping what torch frees (sagerl.allocator): in effect where sagerl's entry points run, off with
SAGERL_MALLOC=system. Each case runs in a new process: the setting is process-wide and set once."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

PROBE = """
import ctypes, json, sys
import torch
from sagerl.allocator import keep_freed_memory
on = keep_freed_memory()
libc = ctypes.CDLL("libc.so.6")
libc.sbrk.restype = ctypes.c_void_p
libc.sbrk.argtypes = [ctypes.c_long]
block = torch.empty(64 * 2**20 // 4)  # 64 MiB: above glibc's largest mmap threshold (32 MiB)
in_heap = block.data_ptr() < libc.sbrk(0)  # the heap ends at the program break; mmap'd blocks lie far above it
print(json.dumps({"on": on, "again": keep_freed_memory(), "in_heap": in_heap}))
"""

glibc = pytest.mark.skipif(
    not sys.platform.startswith("linux") or os.confstr("CS_GNU_LIBC_VERSION") is None, reason="glibc only"
)


def probe(**env: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", PROBE], env={**os.environ, **env}, capture_output=True, text=True, check=True
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


@glibc
def test_a_large_tensor_comes_from_the_heap_once_it_is_on():
    assert probe() == {"on": True, "again": True, "in_heap": True}


@glibc
def test_system_leaves_glibc_as_it_is():
    assert probe(SAGERL_MALLOC="system") == {"on": False, "again": False, "in_heap": False}


def test_the_entry_points_turn_it_on():
    import inspect

    import sagerl.cli
    import sagerl.demo
    from sagerl.study import runner

    for function in (sagerl.cli.main, sagerl.demo.main, runner._init_worker):
        assert "keep_freed_memory()" in inspect.getsource(function), function.__qualname__
