"""The fault classes of the fault suite, each with the behaviour sagerl guarantees and the tests that prove it.

A test id is a pytest node id without parameters ("file::function", or a whole file); it covers every
parametrized case of that function. Many tests live beside the code they test (objective, grading, eval);
this registry only groups them. ``python -m tests.faults`` runs exactly these tests and prints the table;
``make test`` prints it after the whole suite (tests/conftest.py).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FaultClass:
    name: str
    behaviour: str
    tests: tuple[str, ...]


FAULT_CLASSES: tuple[FaultClass, ...] = (
    FaultClass(
        "malformed JSONL (bad JSON, missing field, wrong type, non-UTF-8, empty file, duplicate ids)",
        "one-line error naming file, line and field; an empty file is refused before anything is written; "
        "a torn last line of samples.jsonl is cut off, a bad line elsewhere is named",
        (
            "tests/test_tasks.py::test_bad_rows_name_file_line_and_field",
            "tests/test_tasks.py::test_not_utf8",
            "tests/faults/test_inputs.py::test_empty_jsonl_file_is_refused_by_eval_and_train",
            "tests/train/test_train_cli.py::test_dataset_row_without_answer_names_file_and_line",
            "tests/test_eval_run.py::test_load_samples_tolerates_only_a_truncated_last_line",
        ),
    ),
    FaultClass(
        "grader hang (main thread)",
        "SIGALRM deadline per answer: incorrect after the timeout; the caller's own alarm is kept",
        (
            "tests/test_grading.py::test_pathological_answer_returns_within_timeout",
            "tests/test_grading.py::test_caller_alarm_is_kept",
        ),
    ),
    FaultClass(
        "grader hang (worker threads)",
        "helper process with the same deadline; killed and restarted when stuck in C code",
        (
            "tests/test_grading.py::test_is_correct_from_a_thread",
            "tests/test_grading.py::test_stuck_helper_process_is_killed_after_the_limit",
        ),
    ),
    FaultClass(
        "NaN or inf in logits or rewards",
        "NaN reward: advantage 0 and out of group statistics; NaN entropy: q = 1; inf: q clamped; "
        "masked NaN/inf ignored; loss and gradient finite",
        (
            "tests/objective/test_losses.py::test_grpo_advantages_ignore_unscorable",
            "tests/objective/test_losses.py::test_empty_and_fully_masked_rows",
            "tests/objective/test_losses.py::test_dapo_helpers",
            "tests/faults/test_inputs.py::test_nan_and_inf_in_entropies_and_log_probs_give_finite_guides_and_loss",
        ),
    ),
    FaultClass(
        "empty completion",
        "no answer: incorrect, recorded, counted in pass@k; zero-length rows add nothing to the loss",
        (
            "tests/faults/test_inputs.py::test_empty_completion",
            "tests/objective/test_losses.py::test_empty_and_fully_masked_rows",
        ),
    ),
    FaultClass(
        "equal-reward groups",
        "advantages exactly 0 (GRPO, Dr.GRPO, BNPO); DAPO dynamic sampling drops the group",
        (
            "tests/objective/test_losses.py::test_grpo_and_dr_grpo_advantages",
            "tests/objective/test_losses.py::test_bnpo_degenerate_and_extreme_batches",
            "tests/objective/test_losses.py::test_dapo_helpers",
        ),
    ),
    FaultClass(
        "one-sample groups",
        "advantages 0, never NaN; DAPO filters every group; only the anchor term is left",
        ("tests/faults/test_inputs.py::test_one_sample_groups",),
    ),
    FaultClass(
        "truncated completions",
        "a final box cut off means no answer (never an earlier box); truncated share reported; overlong shaping",
        (
            "tests/faults/test_inputs.py::test_truncated_completion",
            "tests/test_grading.py::test_kk_follows_the_final_box_rule",
            "tests/objective/test_losses.py::test_dapo_helpers",
        ),
    ),
    FaultClass(
        "huge log-ratios",
        "log-ratios clamped to ±20 nats: k1/k2/k3, forward KL, surrogate, loss and gradient finite",
        ("tests/objective/test_losses.py::test_extreme_inputs_stay_finite",),
    ),
    FaultClass(
        "kill during train, checkpoint write included",
        "SIGKILL ×4 (random moments, mid optimizer.pt, mid trainer_state.json): partial checkpoint skipped "
        "with a warning; same command resumes; bitwise-equal weights; no extra step on rerun",
        ("tests/faults/test_kill.py::test_kill_train_repeatedly_then_resume_gives_the_same_weights",),
    ),
    FaultClass(
        "kill during eval",
        "SIGKILL ×3 (random moments, mid-line): torn line cut off, no finished sample lost or redone, "
        "same samples and pass@k as an uninterrupted run",
        ("tests/faults/test_kill.py::test_kill_eval_repeatedly_then_resume_gives_the_same_results",),
    ),
    FaultClass(
        "vLLM engine dies during eval (its worker killed)",
        "one line naming the engine's death and 'rerun the same command to resume'; samples.jsonl keeps whole "
        "lines; the rerun resumes to the samples and pass@k of an uninterrupted run; runs in .venv-vllm "
        "(make test-vllm)",
        ("tests/integrations/vllm/test_vllm_faults.py::test_kill_engine_worker_then_resume",),
    ),
    FaultClass(
        "disk full during a write",
        "one-line error naming the path; atomic files keep the old version; samples.jsonl cut back to "
        "whole lines; a rerun resumes",
        ("tests/faults/test_disk_full.py",),
    ),
    FaultClass(
        "changed config on resume",
        "refused with the keys that differ (train), the settings that differ (eval) or the cells and keys "
        "that differ (study, before training anything)",
        (
            "tests/train/test_train_cli.py::test_resume_continues_exactly",
            "tests/test_eval_run.py::test_refuses_to_mix_sampling_settings",
            "tests/test_eval_run.py::test_refuses_other_model",
            "tests/study/test_study.py::test_rerun_refuses_finished_cells_whose_settings_changed",
        ),
    ),
    FaultClass(
        "two runs in one folder",
        "the second fails at once naming the folder and the first process (pid, host, command, start); "
        "a killed holder does not block",
        ("tests/faults/test_two_runs.py",),
    ),
    # The faults of issue 9 that are not in the list above.
    FaultClass(
        "numbers compared after rounding (issue 9 #1)",
        "exact values exactly, decimals within 1e-6 relative; property test over rationals 1e-40..1e40",
        (
            "tests/test_grading_numbers.py",
            "tests/test_grading.py::test_equivalent_answers_are_correct",
            "tests/test_grading.py::test_wrong_or_missing_answers_are_incorrect",
        ),
    ),
    FaultClass(
        "box spellings, cut-off and split answers (issue 9 #2-4)",
        "boxed and fbox; the last box opened is final; joined boxes form one answer; Math-Verify's cases",
        (
            "tests/test_grading.py::test_extract_boxed",
            "tests/test_grading.py::test_find_last_boxed_spans",
            "tests/test_grading.py::test_kk_follows_the_final_box_rule",
            "tests/test_grading_math_verify.py",
        ),
    ),
    FaultClass(
        "run folder written before the arguments are checked (issue 9 #6)",
        "options, datasets and model checked first ('no config.json in DIR'); nothing written on error",
        ("tests/faults/test_arguments.py",),
    ),
    FaultClass(
        "command-line usage errors (issue 9 #7)",
        "usage line + one error line, exit status 2, no traceback; --version",
        (
            "tests/test_cli.py::test_usage_errors_in_a_subprocess",
            "tests/test_cli.py::test_every_usage_error_is_two_lines_and_status_2",
            "tests/test_cli.py::test_version",
        ),
    ),
    FaultClass(
        "README and demo disagree; compare writes into the cwd (issue 9 #8)",
        "README's demo settings read from the demo's config; compare writes only with --out",
        ("tests/test_demo_readme.py", "tests/test_cli.py::test_compare_writes_a_plot_only_with_out"),
    ),
    FaultClass(
        "third-party warnings (issue 9 #9)",
        "known harmless ones silenced by message; every other warning shows",
        (
            "tests/test_cli.py::test_known_harmless_warnings_are_silenced_and_others_still_show",
            "tests/test_cli.py::test_the_cli_installs_the_filters_and_shows_other_warnings",
        ),
    ),
    FaultClass(
        "hub columns that differ from the mapping (issue 9 #10)",
        "one line naming set, missing column and columns present, at load; rows without an answer dropped "
        "with a count",
        ("tests/test_hub_mappings.py",),
    ),
)


def classes_of(nodeid: str) -> list[FaultClass]:
    """The fault classes a collected test (its node id, parameters included) belongs to."""
    base = nodeid.split("[", 1)[0]
    return [c for c in FAULT_CLASSES if any(base == t or base.startswith(t + "::") for t in c.tests)]


def all_test_ids() -> list[str]:
    """Every registered test id, once, in registry order."""
    return list(dict.fromkeys(t for c in FAULT_CLASSES for t in c.tests))
