"""Fixtures for the whole suite, and the suite's pytest set-up: the `slow` and `uid` markers, the
groups of tests that must not run at the same time under pytest-xdist, every test's own lease
directory (and a guard on the machine's shared one), and a summary line counting the torch tests
that did not run because torch is not installed.

The plain helpers the fixtures use (and test modules import) are in helpers.py:
`from helpers import run_vram, ...`.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import signal
import sys
import tempfile
from pathlib import Path
from typing import Any

import helpers
import pytest
from helpers import UID_FILES, Children, Groups, Leasing, Served, Strays, run_vram

from vramkit import i18n
from vramkit.leases import SHARED_DIR

# The suite checks English wording: every test, and every `vram` it starts (children inherit the
# environment; helpers.clean_env keeps it), speaks English whatever the machine's LANG, so the suite
# passes under LANG=zh_CN.UTF-8 too. A test of Chinese output overrides it (helpers.zh_env(), or
# monkeypatch VRAM_LANG and call vramkit.i18n.reset(); the autouse fixture below resets after).
os.environ["VRAM_LANG"] = "en"

# A test file may import another by its basename (pytest's rootdir-less "prepend" import mode, no
# __init__.py: basenames are unique, tests/test_suite_rules.py checks). pytest puts a folder on
# sys.path only when it collects a file there, so a top-level file importing one in a folder of
# tests/README.md would fail when run alone: the folders are on the path from the start.
sys.path.extend(str(Path(__file__).parent / folder) for folder in ("e2e", "redteam", "docs", "containers"))


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "slow: takes a second or more (real waiting, many processes); "
                   "`make test-fast` leaves these out (-m 'not slow'), `make test` runs them")
    config.addinivalue_line(
        "markers", "uid: the result depends on who runs the suite (root or an ordinary user); "
                   "set here for the files in helpers.UID_FILES and for tests that skip for root or "
                   "non-root or use shared_dir. CI runs these again as an ordinary user (make test-user)")
    config.addinivalue_line(
        "markers", "any_user: a test in a file of helpers.UID_FILES whose result does not depend on who "
                   "runs it (its own files in tmp_path, no lease, user, other process or ownership in it): "
                   "not marked uid, so CI does not run it a second time as an ordinary user")
    if not config.pluginmanager.hasplugin("xdist"):  # the mark is xdist's; without it, harmless
        config.addinivalue_line("markers", "xdist_group(name): run in one pytest-xdist worker")
    # Every test's lease directory lives under this one (see own_lease_dir), and so does the one
    # used before the first test (collection, module fixtures): never the machine's shared one.
    base = Path(tempfile.mkdtemp(prefix="vramkit-tests-"))
    base.chmod(0o755)  # vram run as another user (nobody) must reach the lease directories in it
    config.stash[_LEASE_BASE] = base
    helpers.TEST_LEASE_DIR = str(_lease_dir_in(base, "session"))
    # Started in the background by a shell without job control (`make test &`, nohup, CI
    # wrappers), pytest inherits SIGINT ignored, and every `vram` it starts would ignore Ctrl-C
    # too; the tests that interrupt `vram run` need the ordinary disposition. A Python-level
    # handler here is reset to the default in every child at exec.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_unconfigure(config):
    base = config.stash.get(_LEASE_BASE, None)
    if base is not None:
        shutil.rmtree(base, ignore_errors=True)


# ---------------------------------------------------------------- lease directories

_LEASE_BASE = pytest.StashKey[Path]()


def _lease_dir_in(base: Path, prefix: str) -> Path:
    """A new lease directory as vram makes a shared one: sticky, writable by every user (a test
    may run vram as nobody), owned by whoever runs the suite."""
    path = Path(tempfile.mkdtemp(prefix=f"{prefix}-", dir=base))
    path.chmod(0o1777)
    return path


def _shared_lease_dir_state() -> tuple | None:
    """What a test could change in the machine's shared lease directory: None when it is not
    there, else its owner, mode, times and entries."""
    try:
        st = os.lstat(SHARED_DIR)
    except FileNotFoundError:
        return None
    try:
        names: list[str] | None = sorted(os.listdir(SHARED_DIR))
    except OSError:
        names = None
    return (st.st_uid, st.st_gid, oct(st.st_mode), st.st_mtime_ns, st.st_ctime_ns, names)


def _describe_lease_state(state: tuple | None) -> str:
    if state is None:
        return "absent"
    uid, gid, mode, _mtime, _ctime, names = state
    return f"uid {uid}, gid {gid}, mode {mode}, entries {names}"


@pytest.fixture(scope="session", autouse=True)
def shared_lease_dir_untouched():
    """The machine's shared lease directory (/tmp/vramkit-leases) is the users', never the
    suite's: the run fails when it is not as it was before the first test."""
    before = _shared_lease_dir_state()
    yield
    after = _shared_lease_dir_state()
    if after != before:
        pytest.fail(f"the test run changed the machine's shared lease directory {SHARED_DIR} "
                    f"(before: {_describe_lease_state(before)}; after: {_describe_lease_state(after)}): "
                    "a test ran `vram pick`/`vram run` (or vramkit's API) without its own VRAM_LEASE_DIR, "
                    "or a real vram on this machine used it meanwhile", pytrace=False)


@pytest.fixture(autouse=True)
def own_lease_dir(request, monkeypatch, shared_lease_dir_untouched) -> Path:
    """Every test's own lease directory: VRAM_LEASE_DIR in this process (vramkit's API) and in
    helpers.clean_env() (the `vram` a test starts). Fails the test that changed the machine's
    shared one (under xdist, possibly a test running at the same time on another worker)."""
    path = _lease_dir_in(request.config.stash[_LEASE_BASE], "leases")
    previous, helpers.TEST_LEASE_DIR = helpers.TEST_LEASE_DIR, str(path)
    monkeypatch.setenv("VRAM_LEASE_DIR", str(path))
    before = _shared_lease_dir_state()
    try:
        yield path
    finally:
        helpers.TEST_LEASE_DIR = previous
        shutil.rmtree(path, ignore_errors=True)
    after = _shared_lease_dir_state()
    if after != before:
        pytest.fail(f"{SHARED_DIR}, the machine's shared lease directory, changed during this test "
                    f"(before: {_describe_lease_state(before)}; after: {_describe_lease_state(after)}): "
                    "give every vram it starts the test's own VRAM_LEASE_DIR (helpers.clean_env does)",
                    pytrace=False)


@pytest.fixture(autouse=True)
def english_after_each_test():
    """The process's language chosen again after every test: a test that switched this process to
    Chinese (or main() that forced English for --json) leaves nothing to the next one."""
    yield
    i18n.reset()


# ---------------------------------------------------------------- marks set by file and by test

# Tests whose result depends on who runs the suite, found without a list: they skip for root or
# for everyone else (helpers.needs_root, or a skipif whose reason names root), or use shared_dir
# (a directory for vram run as another user). Whole files are listed in helpers.UID_FILES, less
# their tests marked any_user (the ordinary user's run in CI is a CPU cost the root suite shares).
_ROOT_REASON = re.compile(r"\broot\b|\buid\b|\bnobody\b|another user|ordinary user", re.IGNORECASE)


def _uid_dependent(item: pytest.Item) -> bool:
    if "shared_dir" in getattr(item, "fixturenames", ()):
        return True
    for mark in item.iter_markers("skipif"):
        reason = mark.kwargs.get("reason", "")
        if isinstance(reason, str) and _ROOT_REASON.search(reason):
            return True
    return item.path.name in UID_FILES and item.get_closest_marker("any_user") is None


SLOW_SECONDS = 2.0  # the summary names the tests not marked slow that took this long

# Slow tests not marked in their own files, by file::function (every parametrized case) or
# file::function[case]: the slowest by `--durations=0` of `make test-fast` on 2 cores (quiet), each function's
# cases summed, cut where the rest sum to about 65 s (functions of 0.3 s and more; on 2 December: 2,700 tests,
# 166 s of test time and 101 s of wall before this cut), so that `make test-fast` stays under a minute there
# (two workers, each collecting the suite first: about 6 s). The docs' console examples are slow as a whole
# (each runs vram). `make test-fast` leaves them out; `make test` runs them.
SLOW_TESTS: frozenset[str] = frozenset({
    "test_alert_rules.py::test_promtool_unit_tests_pass",
    "test_allocate_inside.py::test_a_hold_does_not_record_a_host_pid_as_a_process_here",
    "test_allocate_inside.py::test_a_hold_is_not_ended_by_a_process_outside_the_container",
    "test_allocate_inside.py::test_a_hold_taken_in_a_container_is_not_ended_by_the_hosts_pids",
    "test_allocate_inside.py::test_a_run_lease_is_not_ended_by_a_host_pid_numbered_as_its_jobs_child",
    "test_allocate_inside.py::test_a_run_lease_under_an_outer_namespaces_proc_does_not_compare_its_pids",
    "test_allocate_locks.py::test_a_gpu_leased_while_choosing_makes_acquire_choose_again",
    "test_amd.py::test_a_graphics_only_client_is_a_graphics_process_on_the_sysfs_path",
    "test_amd.py::test_amdsmi_and_sysfs_read_the_same_machine",
    "test_amd.py::test_doctor_names_the_memory_rocms_runtime_holds_in_its_own_words",
    "test_amd.py::test_holders_of_kfd_and_render_nodes_are_found_by_gpu",
    "test_amd.py::test_kill_frees_an_amd_gpu_and_finds_the_worker_still_holding_its_render_node",
    "test_amd.py::test_kill_says_what_lists_an_amd_gpus_processes_and_which_device_files_it_looked_for",
    "test_amd.py::test_the_pynvml_shim_refuses_an_amd_only_scenario_and_serves_a_mixed_hosts_nvidia_part",
    "test_amd_visible.py::test_doctor_names_rocms_visible_device_mistakes",
    "test_amd_visible.py::test_vram_run_format_uuid_on_an_amd_pick",
    "test_amd_visible.py::test_vram_run_on_a_mixed_host_sets_the_picked_vendors_variable_and_never_both",
    "test_cli_no_driver.py::test_help_has_examples",
    "test_completion.py::test_bash_completes_from_the_parser",
    "test_completion.py::test_bash_offers_file_names_with_spaces_as_one_word",
    "test_config_hostile.py::test_a_value_with_a_hidden_character_is_refused",
    "test_config_hostile.py::test_numbers_and_nesting_no_parser_survives_are_one_line",
    "test_doctor_savings.py::test_where_the_estimate_agrees_with_the_message_savings_are_the_estimators",
    "test_doctor_traceback.py::test_the_phase_leads_the_fixes",
    "test_doctor_traceback.py::test_the_text_says_where_it_failed",
    "test_estimate_cli.py::test_bad_input_is_one_line_and_exit_2",
    "test_estimate_cli.py::test_hostile_config_values_are_one_line_errors",
    "test_estimate_cli.py::test_hostile_moe_and_attention_shapes_are_one_line_errors",
    "test_estimate_compare_offload.py::test_a_comparison_it_cannot_make_is_one_line",
    "test_estimate_families.py::test_estimate_and_plan_take_a_config_dict_or_a_transformers_config",
    "test_estimate_generation.py::test_bad_new_tokens_are_one_line_errors",
    "test_estimate_quant_zero.py::test_contradictions_are_one_line_errors",
    "test_estimate_stack.py::test_the_command_line_and_describe_read_the_row",
    "test_estimate_stack.py::test_the_planner_reads_the_row",
    "test_estimate_stack.py::test_torchtune_generate_allocates_the_builders_whole_cache_before_0_4",
    "test_flags.py::test_a_bad_duration_is_one_line_naming_its_flag",
    "test_fleet_hostile.py::test_a_gpu_index_that_is_not_ascii_digits_is_not_a_gpu",
    "test_fleet_hostile.py::test_deeply_nested_or_unreadable_json_is_one_line",
    "test_fleet_hostile.py::test_malformed_http_is_one_line",
    "test_fleet_hosts.py::test_a_bad_address_is_one_line_and_exit_2",
    "test_fleet_hosts.py::test_a_bad_client_config_is_one_line_naming_the_key",
    "test_history_schema8_hostile.py::test_sigkill_anywhere_each_lifes_totals_stay_its_rows",
    "test_history_workloads.py::test_by_slurm_job",
    "test_history_workloads.py::test_csv_has_the_rows_of_json",
    "test_history_workloads.py::test_text_groups_the_rest_as_none",
    "test_history_workloads.py::test_values_of_the_wrong_kind_in_workloads_are_unknown_never_a_traceback",
    "test_host_pid_keys_inside.py::test_kill_says_a_gpu_held_only_from_outside_is_the_hosts_to_free",
    "test_i18n.py::test_json_and_csv_switch_the_process_to_english",
    "test_i18n.py::test_the_catalog_vram_reads_answers_as_gettext_does",
    "test_i18n.py::test_the_config_reader_loads_for_the_language_only_when_a_file_mentions_it",
    "test_i18n.py::test_the_language_comes_from_vram_lang_then_the_config_then_the_locale",
    "test_i18n.py::test_the_pseudo_locale_is_spoken",
    "test_i18n.py::test_the_pseudo_locale_keeps_tables_within_80_columns",
    "test_i18n.py::test_the_pseudo_locale_leaves_no_english_outside_the_messages",
    "test_i18n.py::test_what_a_program_reads_is_the_same_in_every_language",
    "test_i18n_doctor.py::test_checklist_is_chinese",
    "test_i18n_doctor.py::test_checklist_sentences_built_from_values_are_chinese",
    "test_i18n_doctor.py::test_every_real_log_reads_in_chinese",
    "test_i18n_estimate.py::test_json_stays_english_where_the_text_is_chinese",
    "test_i18n_estimate.py::test_other_setups_are_chinese",
    "test_i18n_history.py::test_a_failing_rollup_is_said_in_chinese",
    "test_i18n_serve_web.py::test_a_chinese_server_s_api_errors_stay_english",
    "test_i18n_serve_web.py::test_a_chinese_server_s_web_config_errors_are_chinese",
    "test_i18n_status.py::test_info_in_chinese",
    "test_i18n_status.py::test_report_in_chinese_lines_up_at_80_columns",
    "test_i18n_status.py::test_status_of_a_faulty_machine_says_why_in_chinese",
    "test_info_inside.py::test_info_never_shows_a_host_pid_as_a_pid_here",
    "test_kill.py::test_bad_usage_is_one_line_and_exit_2",
    "test_leases_security.py::test_a_hostile_lock_file_is_gone_around_and_named",
    "test_leases_security.py::test_a_lease_that_does_not_validate_is_ignored_and_named",
    "test_life_cli.py::test_unknown_pid_says_so_and_exits_1",
    "test_notices.py::test_example_scripts_refuse_a_hostile_user_name_and_run_nothing",
    "test_pick.py::test_bad_usage_is_exit_2",
    "test_protect_names.py::test_a_login_users_gpu_job_named_like_a_daemon_can_be_ended",
    "test_ps.py::test_gpu_filter",
    "test_ps.py::test_sort",
    "test_ps.py::test_user_filter",
    "test_ps_env.py::test_a_bad_pid_is_one_line_and_exit_2",
    "test_record_cli.py::test_a_change_of_zone_keeps_the_rollups_going",
    "test_record_cli.py::test_a_directory_another_user_may_write",
    "test_record_cli.py::test_a_rollup_that_keeps_failing_says_so_and_still_keeps_retention",
    "test_report.py::test_colour_only_on_a_terminal_without_no_color",
    "test_report.py::test_csv_has_a_row_per_group_matching_json",
    "test_report.py::test_text_report",
    "test_report_days.py::test_a_recorder_whose_zone_changes_keeps_rolling_up",
    "test_report_days.py::test_a_days_peak_or_rows_only_in_its_other_parts",
    "test_report_days.py::test_other_zones_days_are_stored_days_less_their_other_hours",
    "test_report_days.py::test_other_zones_days_from_hour_totals_and_the_days_first_and_last_hours",
    "test_report_days.py::test_a_schema_5_file_is_upgraded_to_hour_totals_with_the_same_days",
    "test_report_days.py::test_an_hour_local_midnight_cuts_is_summed_from_its_quarters",
    "test_report_days.py::test_in_the_recorders_zone_half_an_hour_off_utc_the_cut_hours_come_from_their_quarters",
    "test_report_days.py::test_a_schema_6_file_is_upgraded_to_quarter_totals_with_the_same_days",
    "test_report_days.py::test_days_across_berlins_clock_change",
    "test_report_days.py::test_in_the_recorders_zone_the_days_are_its_local_days",
    "test_report_days.py::test_vram_report_by_day_prints_the_same_days",
    "test_report_timelines.py::test_days_split_at_local_midnight",
    "test_report_timelines.py::test_per_gpu_equals_the_scenario",
    "test_run.py::test_bad_usage_is_exit_2",
    "test_scenario_errors.py::test_non_finite_numbers",
    "test_scenario_errors.py::test_top_level_not_an_object",
    "test_scenario_hostile.py::test_the_cli_says_it_in_one_line_and_exits_2",
    "test_serve.py::test_a_bad_listen_address_is_one_line_and_exit_2",
    "test_serve_abuse.py::test_a_bad_interval_is_one_line_and_exit_2",
    "test_serve_abuse.py::test_an_address_that_cannot_be_listened_on_is_one_line",
    "test_serve_exposition.py::test_render_equals_prometheus_client_on_bundled_machines",
    "test_serve_exposition.py::test_render_equals_prometheus_client_with_health_xids_and_mig",
    "test_serve_hosts.py::test_without_hosts_the_api_says_so_and_bad_hosts_are_exit_2",
    "test_serve_kernel_xids.py::test_a_gpu_whose_driver_refuses_xid_events_counts_them_from_the_kernel_log",
    "test_serve_kernel_xids.py::test_without_a_readable_kernel_log_that_gpu_has_no_xid_series",
    "test_serve_webconfig.py::test_the_command_says_one_line_and_exits_2",
    "test_serve_webconfig.py::test_without_the_serve_extra_it_says_what_to_install",
    "test_shim.py::test_nvitop_once_sees_the_same_machine",
    "test_shim_paths.py::test_import_pynvml_through_a_shim_in_a_hostile_directory_runs_no_code",
    "test_sim_threads.py::test_a_process_whose_main_thread_exited_still_holds_memory",
    "test_simulated_real_processes.py::test_hostile_command_line_is_stripped_in_text",
    "test_status.py::test_gpu_selection_json",
    "test_status.py::test_no_color_on_a_terminal",
    "test_text_unicode.py::test_text_and_csv_views_replace_them",
    "test_top_owners.py::test_a_host_pid_is_never_shown_or_signalled_as_a_pid_here",
    "test_top_owners.py::test_gpu_panels_show_fan_and_busy_video_engines_where_status_does",
    "test_top_owners.py::test_owner_column_shows_each_process_workload",
    "test_top_owners.py::test_users_line_sums_each_user_on_the_gpus_shown",
    "test_top_owners.py::test_workload_filters_as_ps_takes_them",
    "test_torch_batch.py::test_the_trials_collections_walk_only_what_the_search_made",
    "test_torch_where.py::test_fp32_norms_and_rotary_buffers_of_a_transformers_model",
    "test_trace_memory.py::test_mlp_step_on_fake_tensors",
    "test_validate_published.py::test_the_summary_is_the_table_s",
    "test_vramkit_api_lazy.py::test_import_is_light_and_the_functions_load_their_modules",
    "test_vramkit_api_types.py::test_every_documented_example_passes_mypy_strict",
    "test_vramkit_api_types.py::test_nothing_public_is_any",
    "test_vramkit_architecture.py::test_proc_is_read_in_procs_only",
    "test_torch_guard_oom_phases.py::test_forward_names_the_layer_that_allocated_and_the_users_line",
    "test_audit_security.py::test_a_fifo_as_the_log_fails_at_once_and_signals_nothing",
    "test_doctor_checklist_lost_gpu.py::test_doctor_names_the_lost_gpu_of_the_faulty_scenario",
    "test_cli_output_errors.py::test_a_pid_that_does_not_exist_is_no_such_process",
    "test_collector.py::test_kill_idle_drops_a_process_that_works_again_while_others_are_watched",
    "test_collector.py::test_kill_idle_judges_by_the_collectors_clock",
    "test_collector.py::test_the_background_loop_fans_out_and_survives_errors",
    "test_collector.py::test_the_idle_clock_runs_across_samples",
    "test_completion.py::test_a_description_with_quotes_survives_every_shell",
    "test_completion.py::test_bash_offers_every_option_of_every_command",
    "test_completion.py::test_bash_still_offers_scenarios_after_simulate_and_only_words_for_choices",
    "test_completion.py::test_fish_completes_from_the_parser",
    "test_completion.py::test_real_bash_tab_completes_a_file_name_with_spaces_into_one_argument",
    "test_completion.py::test_zsh_completes_from_the_parser",
    "test_docs_examples.py::test_console_example_is_the_real_output",
    "test_doctor_checklist.py::test_gpu_option_narrows_and_checks_the_index",
    "test_doctor_cli.py::test_a_fix_left_without_a_number_says_why_and_asks_for_the_model_only_when_missing",
    "test_doctor_cli.py::test_bad_options_are_one_line_exit_2",
    "test_doctor_cli.py::test_batch_and_seq_are_spelled_as_in_estimate_and_the_old_way_too",
    "test_doctor_savings.py::test_llama_8b_on_an_80_gib_card_and_precision",
    "test_doctor_savings.py::test_the_estimate_style_spellings_are_the_same_options",
    "test_doctor_shared_gpu.py::test_the_idle_process_on_a_busy_gpu_is_found",
    "test_doctor_snapshot.py::test_the_trainer_callbacks_dump_a_snapshot_on_oom",
    "test_doctor_snapshot.py::test_vram_doctor_reads_a_snapshot_and_writes_the_timeline",
    "test_estimate_cli.py::test_a_config_file_is_read_bounded_and_never_waited_on",
    "test_estimate_cli.py::test_batch_size_and_seq_len_are_accepted_as_in_doctor",
    "test_estimate_cli.py::test_estimate_table_and_json",
    "test_estimate_cli.py::test_missing_config_keys",
    "test_estimate_cli.py::test_numbers_are_ascii_digits_and_options_their_own_type",
    "test_estimate_cli.py::test_plan_ranks_changes_and_lists_gpus",
    "test_estimate_cli.py::test_the_default_eager_attention_says_what_sdpa_would_need_where_the_scores_dominate",
    "test_estimate_compare_offload.py::test_deepspeed_offload_needs_host_memory_as_deepspeed_estimates_it",
    "test_estimate_compare_offload.py::test_inference_over_several_gpus_splits_layers_and_is_not_ddp",
    "test_estimate_compare_offload.py::test_several_precisions_are_one_table_of_the_same_estimates",
    "test_estimate_families.py::test_adapter_dtype_fp32_is_peft_s_default_and_16bit_is_litgpt_s",
    "test_estimate_families.py::test_an_unsupported_model_type_lists_what_is_supported",
    "test_estimate_families.py::test_bottleneck_adapters_and_prefix_tuning",
    "test_estimate_foreach.py::test_the_for_loop_adam_agrees_with_its_trace",
    "test_estimate_foreach.py::test_torch_versions_on_the_command_line",
    "test_estimate_fsdp.py::test_cli_fsdp",
    "test_estimate_generation.py::test_the_transformers_flag_selects_the_generate_semantics_by_version",
    "test_estimate_generation.py::test_what_generation_cannot_be_combined_with",
    "test_estimate_hostile_config.py::test_a_zero_or_huge_size_names_the_key_and_the_file",
    "test_estimate_hostile_config.py::test_every_key_of_each_kind_of_config_with_every_hostile_value",
    "test_estimate_hostile_config.py::test_every_key_of_each_kind_of_config_with_every_hostile_value[gemma-7b]",
    "test_estimate_hostile_config.py::test_every_key_of_each_kind_of_config_with_every_hostile_value[gpt-neox-20b]",
    "test_estimate_hostile_config.py::test_every_key_of_each_kind_of_config_with_every_hostile_value[llama-2-7b]",
    "test_estimate_hostile_config.py::test_every_key_of_each_kind_of_config_with_every_hostile_value[mistral-7b]",
    "test_estimate_hostile_config.py::test_every_key_of_each_kind_of_config_with_every_hostile_value[mixtral-8x7b]",
    "test_estimate_hostile_config.py::test_every_key_of_each_kind_of_config_with_every_hostile_value[opt-1.3b]",
    "test_estimate_hostile_config.py::test_every_key_of_each_kind_of_config_with_every_hostile_value[qwen2.5-7b]",
    "test_estimate_hostile_config.py::test_every_key_of_each_kind_of_config_with_every_hostile_value[qwen3-8b]",
    "test_estimate_hostile_config.py::test_every_key_of_each_kind_of_config_with_every_hostile_value[starcoder]",
    "test_estimate_hostile_config.py::test_plan_on_random_keys_of_every_bundled_config",
    "test_estimate_hub_cache.py::test_a_snapshot_linking_out_of_its_blobs_is_refused",
    "test_estimate_loading.py::test_the_cli_flags_and_their_errors",
    "test_estimate_loading.py::test_the_transformers_flag_selects_the_kv_cache_semantics",
    "test_estimate_qlora_sharded.py::test_cli_estimates_fsdp_qlora_and_refuses_8bit_in_one_line",
    "test_estimate_quant_zero.py::test_cli_options_reach_the_setup",
    "test_estimate_quant_zero.py::test_torch_semantics_are_an_option_and_said",
    "test_estimate_settings.py::test_a_static_cache_is_sized_by_its_length_with_its_mask",
    "test_estimate_settings.py::test_torchao_weight_only_quantization_for_inference",
    "test_estimate_stack.py::test_loop_presets_set_their_rows_and_the_old_flags_stay_with_a_note",
    "test_estimate_stack.py::test_the_header_names_each_default_it_assumed",
    "test_estimate_stack.py::test_the_stack_defaults_to_what_is_installed_and_says_so",
    "test_flags.py::test_a_misspelt_flag_gets_a_suggestion_and_the_commands_own_help",
    "test_flags.py::test_estimate_and_plan_help_come_in_groups",
    "test_flags.py::test_the_old_name_runs_the_command_with_a_one_line_note",
    "test_fleet.py::test_a_down_host_is_said_plainly_and_shows_no_stale_numbers",
    "test_fleet.py::test_an_answer_is_bounded",
    "test_fleet.py::test_answers_that_are_not_data_are_errors",
    "test_fleet.py::test_fleet_and_fleet_pick_as_commands",
    "test_fleet.py::test_hostile_label_values_are_sanitized",
    "test_fleet.py::test_hosts_gpus_and_top_users_are_parsed",
    "test_fleet.py::test_partial_answers_are_said_per_host",
    "test_fleet.py::test_pick_chooses_the_host_with_the_most_free_memory_and_says_why_others_do_not_fit",
    "test_fleet.py::test_values_that_are_not_numbers_stay_unknown",
    "test_fleet_hostile.py::test_a_body_dripped_a_byte_at_a_time_ends_at_the_deadline",
    "test_fleet_hostile.py::test_a_server_that_never_answers_ends_at_the_deadline",
    "test_fleet_hostile.py::test_an_answer_too_large_is_not_read",
    "test_fleet_hostile.py::test_fuzzed_answers_never_give_an_internal_error",
    "test_fleet_hostile.py::test_headers_dripped_a_byte_at_a_time_end_at_the_deadline",
    "test_fleet_hostile.py::test_label_values_that_are_not_strings_drop_the_sample",
    "test_fleet_hostile.py::test_numbers_out_of_range_are_unknown",
    "test_fleet_hostile.py::test_numbers_out_of_range_are_unknown[vram_gpu_memory_total_bytes--5]",
    "test_fleet_hostile.py::test_numbers_out_of_range_are_unknown[vram_gpu_memory_used_bytes-1e307]",
    "test_fleet_hostile.py::test_numbers_out_of_range_are_unknown[vram_gpu_utilization_ratio--1e307]",
    "test_fleet_hostile.py::test_numbers_out_of_range_are_unknown[vram_gpu_utilization_ratio-Inf]",
    "test_fleet_hostile.py::test_the_deadline_is_for_all_the_queries_together",
    "test_fleet_hostile.py::test_warnings_are_said_once_each_and_at_most_a_few",
    "test_fleet_hosts.py::test_a_host_that_trickles_is_down_at_the_one_deadline_and_the_others_are_shown",
    "test_fleet_hosts.py::test_basic_auth_and_tls_from_a_scrape_config",
    "test_fleet_hosts.py::test_broken_and_hostile_answers_are_said_per_host_and_never_guessed",
    "test_fleet_hosts.py::test_credentials_are_not_carried_over_a_redirect",
    "test_fleet_hosts.py::test_hosts_and_prometheus_are_one_or_the_other",
    "test_fleet_hosts.py::test_two_real_hosts_and_a_dead_one",
    "test_cli_fuzz_inputs.py::test_mutated_scenarios",
    "test_cli_fuzz_inputs.py::test_random_arguments",
    "test_cli_fuzz_inputs.py::test_random_arguments_through_a_child_process",
    "test_nvml_health.py::test_status_all_text_shows_health_and_reasons",
    "test_nvml_health.py::test_status_reads_health_only_with_all",
    "test_nvml_process_util.py::test_ps_text_json_and_csv_show_the_same_values",
    "test_cli_help.py::test_n_is_count_in_pick_and_run_and_not_a_kill_flag",
    "test_cli_help.py::test_vram_help_command_is_its_help",
    "test_history_hostile.py::test_a_directory_on_the_way_that_another_user_owns",
    "test_history_hostile.py::test_a_neighbour_holding_every_lock_it_can_take_stops_nothing",
    "test_history_hostile.py::test_root_s_readers_refuse_a_database_another_user_can_write",
    "test_history_hostile.py::test_root_s_recorder_refuses_a_file_another_user_made",
    "test_history_hostile.py::test_root_s_recorder_refuses_a_file_others_may_write",
    "test_history_hostile.py::test_the_history_of_the_old_layout_moves_private_under_a_neighbour_s_locks",
    "test_history_malformed.py::test_a_newest_sample_of_the_wrong_type",
    "test_history_malformed.py::test_held_memory_of_the_wrong_type_does_not_stop_recording",
    "test_history_malformed.py::test_hour_sums_meta_that_is_not_a_number",
    "test_history_malformed.py::test_wrong_typed_values_read_back_when_resuming",
    "test_history_malformed_readers.py::test_a_truncated_or_damaged_file",
    "test_history_malformed_readers.py::test_any_value_in_any_column",
    "test_history_malformed_readers.py::test_any_value_in_any_column[gpu_day]",
    "test_history_malformed_readers.py::test_any_value_in_any_column[gpu_hour]",
    "test_history_malformed_readers.py::test_any_value_in_any_column[gpu_raw]",
    "test_history_malformed_readers.py::test_any_value_in_any_column[gpu_rollup]",
    "test_history_malformed_readers.py::test_any_value_in_any_column[gpus]",
    "test_history_malformed_readers.py::test_any_value_in_any_column[jobs]",
    "test_history_malformed_readers.py::test_any_value_in_any_column[meta]",
    "test_history_malformed_readers.py::test_any_value_in_any_column[proc_day]",
    "test_history_malformed_readers.py::test_any_value_in_any_column[proc_hour]",
    "test_history_malformed_readers.py::test_any_value_in_any_column[proc_raw]",
    "test_history_malformed_readers.py::test_any_value_in_any_column[proc_rollup]",
    "test_history_malformed_readers.py::test_any_value_in_any_column[samples]",
    "test_history_malformed_readers.py::test_holding_and_jobs_that_do_not_fit_together",
    "test_history_malformed_readers.py::test_meta_values_and_schema_garbage",
    "test_history_malformed_readers.py::test_missing_tables_columns_and_tables_that_are_views",
    "test_history_malformed_readers.py::test_the_pristine_database_reads",
    "test_history_store.py::test_a_clock_that_went_back_merges_into_rolled_buckets",
    "test_history_store.py::test_rollups_move_raw_to_minutes_to_quarters_without_changing_totals",
    "test_history_store.py::test_the_size_bound_drops_the_oldest_rows_first",
    "test_history_summary.py::test_a_schema_1_database_reads_the_same_before_and_after_its_upgrade",
    "test_history_summary.py::test_hour_sums_equal_the_rows_across_every_seam",
    "test_history_summary.py::test_hour_sums_keep_what_raw_rows_said",
    "test_history_workloads.py::test_an_older_database_still_reports_and_is_upgraded",
    "test_history_workloads.py::test_another_user_reads_workloads_from_the_published_copy",
    "test_history_workloads.py::test_by_container",
    "test_history_workloads.py::test_by_pod_and_namespace",
    "test_history_workloads.py::test_life_says_whose_the_process_was",
    "test_history_workloads.py::test_vram_job_is_vram_life_with_a_note",
    "test_holders.py::test_kill_holders_targets_a_holder_nvml_does_not_list",
    "test_holders.py::test_kill_reports_a_forked_worker_that_still_holds_the_gpu",
    "test_holders.py::test_ps_holders_filters_by_gpu_and_user",
    "test_i18n_serve_web.py::test_a_chinese_browser_reads_the_page_in_chinese",
    "test_i18n_serve_web.py::test_the_driver_s_reasons_are_in_the_reader_s_words",
    "test_i18n_serve_web.py::test_the_same_browser_asking_for_english_gets_the_english_page",
    "test_idle_forged.py::test_a_seconds_old_process_with_a_forged_idle_since_hours_ago_is_not_selected",
    "test_idle_forged.py::test_an_idle_since_in_the_future_is_not_trusted",
    "test_idle_history.py::test_a_named_process_busy_within_the_window_is_not_selected",
    "test_idle_history.py::test_doctor_judges_idle_holders_by_recorded_idle_time",
    "test_idle_history.py::test_doctor_with_history_shorter_than_ten_minutes_falls_back",
    "test_idle_history.py::test_history_shorter_than_the_window_says_so",
    "test_idle_history.py::test_history_that_ended_is_not_used_and_vram_watches",
    "test_idle_history.py::test_idle_for_the_whole_window_is_answered_from_history",
    "test_idle_history.py::test_no_history_database_says_so",
    "test_vramkit_imports.py::test_plain_status_leaves_the_data_output_modules_alone",
    "test_vramkit_imports.py::test_plain_status_leaves_the_health_view_and_glob_alone",
    "test_vramkit_imports.py::test_status_imports_cost_a_few_bare_interpreter_starts",
    "test_info.py::test_faulty_fields_are_na_with_the_reason_and_a_lost_gpu_is_said",
    "test_info.py::test_gpu_arguments_choose_pages_and_bad_ones_are_one_line",
    "test_info.py::test_json_gpu_objects_are_status_all_json",
    "test_info.py::test_mig_mode_not_supported_and_refused_read_differently",
    "test_info.py::test_topology_links_and_numa_node",
    "test_info.py::test_unhealthy_pages_show_health_and_own_utilization",
    "test_info.py::test_what_doctor_flags_is_painted_on_a_terminal",
    "test_json_doc.py::test_info_json_topology_keys_are_documented",
    "test_json_doc.py::test_status_all_json_gpu_process_and_health_keys_are_documented",
    "test_kill.py::test_asks_and_answering_no_signals_nothing",
    "test_kill.py::test_colour_only_on_a_terminal_and_never_with_no_color",
    "test_kill.py::test_hostile_command_lines_are_stripped",
    "test_kill.py::test_idle_drops_a_process_whose_gpu_gets_busy_during_the_window",
    "test_kill.py::test_terminates_gpu_processes_and_reports_freed_memory",
    "test_kill.py::test_without_a_terminal_and_without_yes_it_refuses",
    "test_kill_safety.py::test_a_normal_user_cannot_signal_roots_process",
    "test_render_layout.py::test_piped_status_never_reads_the_config_and_a_terminal_is_told_what_is_wrong",
    "test_render_layout.py::test_status_colours_follow_the_config_thresholds",
    "test_leases_locks.py::test_a_gpu_lock_file_that_is_not_a_lock_blocks_that_gpu_only_and_names_its_owner",
    "test_leases_locks.py::test_a_gpu_never_leased_here_cannot_go_to_two_launchers_while_the_directory_lock_is_held",
    "test_leases_locks.py::test_a_held_directory_lock_is_gone_around_and_its_holder_named",
    "test_leases_locks.py::test_a_held_gpu_lock_blocks_that_gpu_only_and_names_its_holder",
    "test_leases_locks.py::test_holding_every_lock_denies_gpus_but_names_the_holder",
    "test_leases_locks.py::test_many_locks_held_by_one_neighbour_cost_one_wait",
    "test_leases_locks.py::test_naming_the_machines_gpus_makes_even_a_first_lease_take_turns",
    "test_leases_locks.py::test_vram_pick_and_run_go_on_while_the_directory_lock_is_held",
    "test_leases_security.py::test_a_lease_lasts_a_day_from_its_files_mtime_and_names_its_files_owner",
    "test_leases_security.py::test_two_users_on_a_fresh_tmp_see_each_other_s_hold",
    "test_leases_security.py::test_two_users_vram_run_on_a_fresh_tmp_never_share_a_gpu",
    "test_leases_swap.py::test_a_gpu_lock_file_swapped_away_and_back_never_gives_the_gpu_twice",
    "test_leases_swap.py::test_a_gpu_lock_file_swapped_between_two_looks_never_gives_the_gpu_twice",
    "test_life_cli.py::test_a_life_in_json_equals_the_scenario",
    "test_life_cli.py::test_bad_input_is_one_line_and_exit_2",
    "test_life_cli.py::test_the_text_shows_totals_sparklines_and_round_slices",
    "test_metrics_compat.py::test_dcgm_exporter_dashboard_fills",
    "test_metrics_compat.py::test_mig_series_carry_dcgm_exporter_s_instance_labels",
    "test_metrics_compat.py::test_nvidia_gpu_exporter_dashboard_fills",
    "test_metrics_compat.py::test_nvitop_exporter_dashboard_fills",
    "test_metrics_compat.py::test_xid_errors_are_counted_from_nvml_events",
    "test_notices.py::test_a_hanging_notice_command_is_killed_with_what_it_started",
    "test_nvml_layer.py::test_a_slow_call_is_made_once_then_shown_as_skipped",
    "test_packaging.py::test_a_wheel_builds_from_the_sdist_alone_and_names_its_licence",
    "test_packaging.py::test_the_sdist_carries_the_docs_the_tests_and_the_licence",
    "test_pick.py::test_explain_counts_gpu_locks_held_by_others_apart_from_leases",
    "test_pick.py::test_use_gpus_refuses_once_cuda_is_initialised",
    "test_plan.py::test_plan_for_generation_leaves_out_what_does_not_lower_the_peak",
    "test_plan.py::test_plan_for_generation_offers_a_newer_transformers_fewer_tokens_and_a_shorter_prompt",
    "test_plan.py::test_plan_over_qlora_keeps_it_when_sharding_and_lists_each_setup_once",
    "test_ps.py::test_piped_output_cuts_the_command_and_wide_never_does",
    "test_ps.py::test_processes_the_driver_cannot_list_are_unknown_not_none",
    "test_simulated_real_processes.py::test_a_process_that_exits_frees_its_memory",
    "test_simulated_real_processes.py::test_a_zombie_child_is_dropped",
    "test_record_cli.py::test_a_companion_file_planted_by_another_user",
    "test_record_cli.py::test_a_database_locked_by_another_recorder",
    "test_record_cli.py::test_a_database_with_a_damaged_page",
    "test_record_cli.py::test_a_newer_schema",
    "test_record_cli.py::test_a_read_only_file_system",
    "test_record_cli.py::test_a_real_process_is_one_life_across_kills",
    "test_record_cli.py::test_a_stop_signal_credits_the_last_sample_and_exits_0",
    "test_record_cli.py::test_a_symlink_is_never_followed",
    "test_record_cli.py::test_a_truncated_database",
    "test_record_cli.py::test_another_user_reads_roots_history",
    "test_record_cli.py::test_disk_full_on_a_small_tmpfs",
    "test_record_cli.py::test_disk_full_through_a_file_size_limit",
    "test_record_cli.py::test_max_size_keeps_the_file_bounded_oldest_first",
    "test_record_cli.py::test_read_only_for_its_user",
    "test_record_cli.py::test_readers_never_fail_nor_block_the_recorder",
    "test_record_cli.py::test_sigkill_at_random_moments_loses_at_most_the_last_interval_and_restart_continues",
    "test_record_cli.py::test_sigkill_on_the_real_clock",
    "test_record_policy.py::test_a_dry_run_says_what_it_would_do_and_runs_nothing",
    "test_record_policy.py::test_the_recorder_runs_the_policy_s_command_for_an_idle_holder",
    "test_config_hostile.py::test_white_space_around_a_value_is_dropped_not_printed",
    "test_doctor_hostile_logs.py::test_a_deep_during_handling_chain_keeps_the_messages_own_frames",
    "test_doctor_hostile_logs.py::test_a_log_whose_last_window_starts_inside_one_long_line_is_still_read",
    "test_doctor_hostile_logs.py::test_a_million_frames",
    "test_doctor_hostile_logs.py::test_logs_without_a_message_are_one_line_exit_1",
    "test_memcap_hostile.py::test_a_loop_growing_an_out_buffer_runs_out_of_memory",
    "test_scenario_hostile.py::test_text_with_escapes_is_refused_or_printed_sanitized",
    "test_fleet_hostile_peers.py::test_a_ca_file_is_the_only_ca_a_host_certificate_may_come_from",
    "test_fleet_hostile_peers.py::test_a_host_saying_it_is_another_host_of_the_list_is_shown_by_its_address",
    "test_workload.py::test_a_real_slurm_steps_gpus_in_ps_and_status_json",
    "test_workload_hostile.py::test_a_job_claiming_another_arrays_task_in_its_environment_still_shows_its_own_job",
    "test_fleet_hostile_peers.py::test_a_prometheus_redirecting_to_ftp_is_not_followed_there",
    "test_workload_hostile.py::test_a_real_process_in_a_users_libpod_scope_is_not_shown_as_roots_container",
    "test_fleet_hostile_peers.py::test_basic_auth_is_not_sent_in_clear_to_a_host_given_without_a_scheme",
    "test_workload_hostile.py::test_container_names_are_not_read_from_a_state_another_user_may_write",
    "test_kubelet_hostile.py::test_a_pod_on_another_pods_gpu_is_not_given_that_pods_name",
    "test_report.py::test_bad_arguments",
    "test_report.py::test_json_schema",
    "test_report.py::test_missing_corrupt_newer_and_foreign_databases",
    "test_report_days.py::test_days_are_summed_as_rows_of_every_tier_fall_into_local_days",
    "test_report_timelines.py::test_per_user_equals_the_scenario",
    "test_report_timelines.py::test_totals_survive_the_rollup",
    "test_report_timelines.py::test_totals_survive_the_rollup[0-10800]",
    "test_report_timelines.py::test_totals_survive_the_rollup[0-93600]",
    "test_run.py::test_a_command_that_cannot_start",
    "test_run_leases.py::test_leases_time_out_and_broken_files_are_cleared",
    "test_serve.py::test_metrics_are_the_scenario_s_numbers_in_base_units",
    "test_serve.py::test_read_only_and_unknown_paths",
    "test_serve.py::test_the_port_in_use_is_one_line_and_exit_2",
    "test_serve.py::test_the_snapshot_api_is_status_json",
    "test_serve_abuse.py::test_a_failing_answer_is_a_500_said_once_and_the_server_goes_on",
    "test_serve_abuse.py::test_a_signal_before_the_first_reading_stops_it_too",
    "test_serve_abuse.py::test_a_signal_stops_it_cleanly_with_event_streams_open",
    "test_serve_abuse.py::test_a_slow_client_is_dropped_after_the_timeout",
    "test_serve_abuse.py::test_a_thousand_concurrent_scrapes",
    "test_serve_abuse.py::test_a_thousand_idle_connections_are_bounded",
    "test_serve_abuse.py::test_a_very_long_request_line_is_refused",
    "test_serve_abuse.py::test_connections_that_send_nothing_hold_no_slot",
    "test_serve_abuse.py::test_hostile_names_still_parse_and_no_command_line_is_exported",
    "test_serve_abuse.py::test_ipv6_loopback",
    "test_serve_abuse.py::test_the_dropped_count_is_the_same_reading_s",
    "test_serve_abuse.py::test_the_process_series_cap",
    "test_serve_abuse.py::test_unknown_paths_and_traversal_are_404",
    "test_serve_hostile.py::test_a_get_with_a_body_is_400_and_its_body_is_never_a_request",
    "test_serve_hostile.py::test_a_real_browser_gets_the_live_page_through_the_siege",
    "test_serve_hostile.py::test_a_real_prometheus_scrapes_through_the_siege",
    "test_serve_hostile.py::test_a_wrong_password_flood_does_not_keep_the_right_one_out",
    "test_serve_hostile.py::test_event_streams_are_limited_per_address",
    "test_serve_hostile.py::test_history_is_computed_once_per_reading_however_many_ask",
    "test_serve_hostile.py::test_idle_connections_and_event_streams_keep_no_one_out",
    "test_serve_hostile.py::test_idle_connections_from_many_addresses_cannot_fill_the_server",
    "test_serve_hostile.py::test_when_every_connection_of_an_address_is_busy_the_next_is_503",
    "test_serve_hostile.py::test_with_tls_and_basic_auth_silent_and_handshaken_connections_keep_no_one_out",
    "test_serve_idle_seed.py::test_serve_continues_the_recorded_idle_time",
    "test_serve_prometheus.py::test_a_host_whose_scrape_fails_is_said_to_be_down",
    "test_serve_prometheus.py::test_a_prometheus_that_is_slow_or_errs_is_one_line_and_exit_1",
    "test_serve_prometheus.py::test_a_prometheus_that_is_slow_or_errs_is_one_line_and_exit_1[/silent-needles0]",
    "test_serve_prometheus.py::test_an_unreachable_prometheus_is_exit_1_and_a_bad_address_exit_2",
    "test_serve_prometheus.py::test_every_dashboard_panel_has_data_and_fleet_shows_each_scenario_exactly",
    "test_serve_updates.py::test_a_bug_building_an_event_costs_the_streams_not_the_server",
    "test_serve_updates.py::test_gzip_when_the_client_asks_and_only_then",
    "test_serve_web.py::test_a_gpu_whose_process_list_is_unknown_says_so_never_zero",
    "test_serve_web.py::test_a_holder_idle_since_before_the_server_watched_shows_no_made_up_duration",
    "test_serve_web.py::test_a_phone_sees_one_column_without_horizontal_scrolling",
    "test_serve_web.py::test_history_charts_from_the_store",
    "test_serve_web.py::test_other_users_names_are_text_not_markup",
    "test_serve_web.py::test_the_first_paint_has_the_reading_without_asking_again",
    "test_serve_web.py::test_the_page_rounds_as_vram_status_does",
    "test_serve_web.py::test_the_page_shows_the_scenario_and_follows_its_timeline",
    "test_serve_web.py::test_the_time_axis_shows_its_date_line_whole",
    "test_serve_web.py::test_without_a_store_the_history_says_why_in_one_line",
    "test_serve_web.py::test_without_event_source_it_polls_and_says_when_the_server_stops",
    "test_serve_webconfig.py::test_a_client_certificate_is_required_when_configured",
    "test_serve_webconfig.py::test_a_client_that_never_starts_its_handshake_blocks_no_one",
    "test_serve_webconfig.py::test_an_unknown_user_costs_what_the_costliest_user_costs",
    "test_serve_webconfig.py::test_basic_auth_over_http",
    "test_serve_webconfig.py::test_basic_auth_without_tls_beyond_loopback_warns_of_clear_text",
    "test_serve_webconfig.py::test_listening_beyond_loopback_without_a_web_config_warns",
    "test_serve_webconfig.py::test_loopback_does_not_warn",
    "test_serve_webconfig.py::test_min_version_is_enforced",
    "test_serve_webconfig.py::test_one_bcrypt_check_at_a_time",
    "test_serve_webconfig.py::test_tls_and_basic_auth_beyond_loopback_do_not_warn",
    "test_serve_webconfig.py::test_tls_with_basic_auth_verified_against_the_certificate",
    "test_shim.py::test_a_peer_on_an_amd_scenario_gets_one_line_not_a_traceback",
    "test_shim.py::test_a_spawned_zombie_runs_no_kernels_as_the_scenario_s_does",
    "test_shim.py::test_nvitop_sees_the_same_health",
    "test_shim.py::test_pynvml_health_calls_see_what_vram_sees",
    "test_shim.py::test_pynvml_health_faults_on_faulty",
    "test_shim.py::test_spawn_runs_every_bundled_scenario_s_placeholders",
    "test_shim.py::test_spawn_without_a_command_runs_until_sigterm_and_ends_its_placeholders",
    "test_sim_liveness.py::test_every_process_is_read_under_a_low_open_files_limit",
    "test_status.py::test_without_watch_json_and_csv_are_unchanged",
    "test_status_compact.py::test_watch_csv_stamps_each_frame",
    "test_status_fan_video.py::test_info_lists_them",
    "test_status_fan_video.py::test_the_fan_and_a_busy_video_engine_follow_the_power",
    "test_suite_rules.py::test_the_uid_mark_goes_on_the_listed_files_and_on_tests_that_skip_for_root",
    "test_suite_summary.py::test_no_torch_line_when_nothing_is_missing",
    "test_top_app.py::test_a_failing_refresh_keeps_the_last_data",
    "test_top_app.py::test_a_gpu_lost_mid_run_shows_as_lost_and_the_view_goes_on",
    "test_top_app.py::test_alerts_show_the_demo_problems",
    "test_top_app.py::test_cells_are_stored_as_text_and_drawn_by_column",
    "test_top_app.py::test_fits_80x24",
    "test_top_app.py::test_only_some_gpus_and_idle_alert_threshold",
    "test_top_app.py::test_the_table_draws_what_changed",
    "test_top_app.py::test_the_view_keeps_the_trend_window_of_each_gpu_not_fifteen_minutes",
    "test_top_app.py::test_tree_view_puts_children_under_parents",
    "test_top_bindings.py::test_the_footer_draws_its_keys_without_key_names_looked_up_and_again_when_its_keys_change",
    "test_top_charts.py::test_the_charts_hold_as_much_after_an_hour_as_after_a_minute",
    "test_top_conveniences.py::test_a_gpu_whose_health_was_read_unhealthy_is_marked_on_its_panel",
    "test_top_conveniences.py::test_a_gpu_whose_health_was_read_unhealthy_is_marked_on_its_panel[size1]",
    "test_top_conveniences.py::test_ascii_draws_no_unicode",
    "test_top_conveniences.py::test_columns_from_the_config",
    "test_top_conveniences.py::test_light_theme_and_colour_thresholds",
    "test_top_conveniences.py::test_sigint_goes_through_the_checked_kill_path",
    "test_top_conveniences.py::test_the_command_line_filters",
    "test_top_conveniences.py::test_the_command_line_filters[view1-pids1]",
    "test_top_conveniences.py::test_the_detail_screen_reads_its_gpus_health",
    "test_top_conveniences.py::test_the_detail_screen_shows_what_the_process_was_told",
    "test_top_conveniences.py::test_the_host_line",
    "test_top_conveniences.py::test_the_process_own_utilization_columns_beside_its_gpus",
    "test_top_ctrl_c_and_user.py::test_ctrl_c_quits",
    "test_top_ctrl_c_and_user.py::test_user_starts_the_table_filtered",
    "test_top_history.py::test_80_columns_draw_the_history_and_leave_out_the_path",
    "test_top_history.py::test_a_bad_database_leaves_a_live_view_and_one_line_why",
    "test_top_history.py::test_a_view_without_a_database_does_not_import_sqlite",
    "test_top_history.py::test_h_cycles_the_range_and_says_how_much_is_recorded",
    "test_top_history.py::test_ranges_keep_live_samples_and_the_help_names_the_key",
    "test_top_history.py::test_the_view_opens_with_the_recorded_hour_drawn",
    "test_top_history.py::test_without_the_database_only_the_live_sample_is_drawn",
    "test_top_kill.py::test_the_kill_path_is_imported_at_the_first_kill_not_with_the_view",
    "test_top_memory.py::test_starting_leaves_no_garbage_and_a_refresh_bounds_richs_cell_lengths",
    "test_top_visible_rows.py::test_a_refresh_redraws_the_cells_that_changed_and_the_screen_shows_them",
    "test_top_visible_rows.py::test_each_line_is_drawn_as_rich_lays_out_its_cells",
    "test_top_visible_rows.py::test_far_down_the_list_the_right_rows_are_drawn_and_clicked",
    "test_top_visible_rows.py::test_the_cursor_goes_to_the_top_when_its_process_is_gone",
    "test_top_widths.py::test_gpu_rows_with_names_of_different_lengths_put_their_columns_in_the_same_place",
    "test_top_widths.py::test_gpu_rows_with_names_of_different_lengths_put_their_columns_in_the_same_place[size1]",
    "test_top_widths.py::test_table_cells_are_cut_by_display_width",
    "test_top_widths.py::test_the_help_screen_fits_without_wrapping_a_line_of_keys[size0]",
    "test_top_widths.py::test_the_help_screen_fits_without_wrapping_a_line_of_keys[size1]",
    "test_top_widths.py::test_the_help_screen_fits_without_wrapping_a_line_of_keys[size2]",
    "test_gpu_choice_topology.py::test_pick_explains_the_connection",
    "test_torch_batch.py::test_batch_finder_when_nothing_fits_and_other_errors_propagate",
    "test_torch_batch.py::test_batch_search_summary_when_nothing_fits",
    "test_torch_leak_defects.py::test_fix_text_for_cached_hidden_states_says_detach_or_clear_the_cache",
    "test_torch_leak_defects.py::test_the_hf_callback_withdraws_a_leak_that_stopped_growing_and_never_flags_a_deque",
    "test_torch_leaks.py::test_holders_are_named_through_variables_containers_and_attributes",
    "test_torch_leaks.py::test_holders_through_a_class_attribute",
    "test_trace_memory.py::test_a_backward_pass_without_an_optimizer_traces",
    "test_text_unicode.py::test_sanitize_replaces_every_format_and_separator_character",
    "test_gpu_state_unknown_process_lists.py::test_fleet_shows_na_for_an_unknown_list",
    "test_validate_published.py::test_every_printed_number_is_what_the_estimator_returns",
    "test_validate_published.py::test_the_table_covers_what_the_issue_asks",
    "test_workload.py::test_a_real_cgroup_name_with_escapes_below_a_users_systemd_is_not_a_container",
    "test_workload_dcgm.py::test_a_kubelet_that_hangs_leaves_the_gpus_unlabelled_and_is_not_asked_again_at_once",
    "test_workload_dcgm.py::test_a_real_serve_labels_each_gpu_with_the_pod_the_kubelet_allocated_it_to",
    "test_workload_dcgm.py::test_without_compat_dcgm_the_kubelet_is_not_asked_for_gpus",
    "test_workload_kubelet.py::test_a_kubelet_that_hangs_is_given_up_on",
    "test_workload_kubelet.py::test_a_socket_that_never_speaks_grpc_is_given_up_on",
    "test_workload_trust.py::test_a_match_not_believed_is_said_once_where_people_look",
    "test_workload_views.py::test_filters_in_ps_and_status",
    "test_workload_views.py::test_kill_says_whose_the_process_is",
    "test_workload_views.py::test_metrics_label_each_owner",
    "test_workload_views.py::test_ps_shows_each_owner_and_nothing_for_a_bare_process",
})


def _listed_slow(item: pytest.Item) -> bool:
    key = f"{item.path.name}::{item.nodeid.split('::', 1)[-1]}"
    return key in SLOW_TESTS or key.split("[", 1)[0] in SLOW_TESTS

# Tests that must not run at the same time as each other under pytest-xdist, or that share a costly
# module fixture, by file: each group runs in one worker (make test uses --dist loadgroup).
XDIST_GROUPS: dict[str, str] = {
    # its module fixture (a Prometheus scraping four vram serve, about 7 s to the first scrape) is
    # only read by its tests: split over two workers it was started twice
    "test_metrics_compat.py": "prometheus-lab",
    # each worker that draws one of their tests imports transformers and peft and warms each family's modeling
    # code and fake-tensor cache (about 10 s of CPU a worker): one worker pays it once
    "test_trace_hf.py": "hf-trace",
    "test_estimate_unknown_family.py": "hf-trace",
    # six module fixtures (recordings of days on the stepped clock, 1-7 s each) that every worker drawing one
    # of its tests made again: 22-29 s of CPU over 3 workers, 13-16 s on one
    "test_report_days.py": "report-days",
    # two module fixtures (`vram record` of 6 h and of 26 h on the stepped clock) that each worker drawing one of
    # its tests recorded again: 6.9 s of CPU in a whole run over 3 workers, 3.7 s in one process
    "test_report_timelines.py": "report-timelines",
}


# Modules with tests of 5 s and more, by their longest test, longest first (a whole run's --durations on 2
# cores), started before the rest: under xdist the last tests decide when the run ends, and a worker that draws
# a 20 s test last keeps the other one idle meanwhile (longest processing time first). The modules of many
# 1-5 s traces (test_trace_agreement) come after the long single tests: they fill in around them. A group
# (XDIST_GROUPS) goes to one worker as a whole, and before every single test: xdist queues its units by their
# number of tests (--loadscope-reorder, its default), so "hf-trace" (test_trace_hf with
# test_estimate_unknown_family, ~60 s of CPU) starts first. Within a module the order stays as written (its
# module fixtures are set up once a worker).
LONGEST_FIRST: tuple[str, ...] = (
    "test_estimate_unknown_family.py", "test_history_malformed_readers.py", "test_estimate_timeline.py",
    "test_estimator_gpu_measurements.py", "test_estimate_cli.py", "test_install_system.py", "test_estimate_families.py",
    "test_serve_web.py", "test_serve_hostile.py", "test_estimate_foreach.py", "test_leases_swap.py", "test_trace_hf.py",
    "test_record_cli.py", "test_serve_abuse.py", "test_notices.py", "test_torch_callbacks.py",
    "test_estimate_hostile_config.py", "test_history_summary.py", "test_run_concurrency.py", "test_serve_prometheus.py",
    "test_leases_locks.py", "test_metrics_compat.py", "test_trace_memory.py", "test_docs_examples.py",
    "test_amd_prometheus.py", "test_torch_batch.py", "test_estimate_stack.py", "test_report_days.py",
    "test_trace_agreement.py",
)


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Under -m "not slow" (make test-fast), a module marked slow as a whole is not even imported
    (transformers, peft: seconds in every worker)."""
    if config.option.markexpr.strip() == "not slow" and collection_path.suffix == ".py" \
            and collection_path.name.startswith("test_"):
        try:
            text = collection_path.read_text()
        except OSError:
            return None
        if re.search(r"^pytestmark = pytest\.mark\.slow\s*(#.*)?$", text, re.MULTILINE):
            return True
    return None


@pytest.hookimpl(tryfirst=True)  # before -m selects by these marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        name = item.path.name
        if _uid_dependent(item):
            item.add_marker(pytest.mark.uid)
        if _listed_slow(item):
            item.add_marker(pytest.mark.slow)
        if name in XDIST_GROUPS and item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(XDIST_GROUPS[name]))
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: each module's order kept


# ---------------------------------------------------------------- torch tests that did not run

TORCH_MISSING = "could not import 'torch'"  # pytest.importorskip's reason


def _count_tests(path: Path, config: pytest.Config) -> int:
    """How many tests a module skipped whole (pytest.importorskip at import) would have run,
    read from its source: each test function times its parametrize cases, where the values are
    literals or module-level literals (a case list it cannot read counts as one)."""
    tree = ast.parse(path.read_text())
    constants: dict[str, Any] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                constants[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                pass
    fast = "not slow" in (config.option.markexpr or "")  # make test-fast deselects these anyway
    if (config.option.markexpr or "").strip() == "uid" and path.name not in UID_FILES:
        return 0  # make test-user: -m uid deselects them anyway
    if fast and "pytestmark = pytest.mark.slow" in path.read_text():
        return 0

    def cases(values: ast.expr) -> int:
        if isinstance(values, ast.Call) and isinstance(values.func, ast.Name) and values.args \
                and values.func.id in ("list", "tuple", "sorted"):
            values = values.args[0]
        if isinstance(values, ast.Name) and isinstance(constants.get(values.id), (list, tuple, dict, set)):
            return len(constants[values.id])
        if isinstance(values, (ast.List, ast.Tuple, ast.Set)):  # written out, whatever its items are
            return len(values.elts)
        try:
            return len(ast.literal_eval(values))
        except (ValueError, TypeError):
            return 1

    def count(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
        if fast and f"{path.name}::{fn.name}" in SLOW_TESTS:
            return 0
        n = 1
        for deco in fn.decorator_list:
            if fast and isinstance(deco, ast.Attribute) and deco.attr == "slow":
                return 0
            if isinstance(deco, ast.Call) and isinstance(deco.func, ast.Attribute) \
                    and deco.func.attr == "parametrize" and len(deco.args) >= 2:
                n *= cases(deco.args[1])
        return n

    total = 0
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
            total += count(node)
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            total += sum(count(f) for f in node.body
                         if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and f.name.startswith("test"))
    return total


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """Without torch, "N passed, 4 skipped" hid ~100 torch tests (whole modules skip as one):
    say how many did not run, and how CI installs torch."""
    missing = 0
    for report in terminalreporter.stats.get("skipped", []):
        longrepr = getattr(report, "longrepr", None)
        if not (isinstance(longrepr, tuple) and TORCH_MISSING in str(longrepr[-1])):
            continue
        if isinstance(report, pytest.CollectReport):  # a whole module
            missing += _count_tests(Path(str(config.rootpath)) / report.nodeid, config)
        else:
            missing += 1
    # Keep `make test-fast` fast: name the tests that took a second or more and are not marked slow.
    unmarked = sorted(((r.duration, r.nodeid) for r in terminalreporter.stats.get("passed", [])
                       if r.when == "call" and r.duration >= SLOW_SECONDS and "slow" not in r.keywords),
                      reverse=True)
    if unmarked:
        terminalreporter.write_line(
            f"{len(unmarked)} test{'s' if len(unmarked) != 1 else ''} not marked slow took "
            f"{SLOW_SECONDS:g} s or more (mark them, or list them in SLOW_TESTS in tests/conftest.py): "
            + ", ".join(f"{nodeid} ({duration:.1f} s)" for duration, nodeid in unmarked[:10])
            + (", ..." if len(unmarked) > 10 else ""), yellow=True)
    # loadgroup keeps a group on one worker by a suffix xdist adds to the test ids in each worker
    # (test.py::name@group); with pytest 9.2 and pytest-xdist 3.8 that suffix no longer takes
    # (pytest-xdist issue 1386) and the groups are spread over the workers without a word.
    if getattr(config.option, "dist", "no") == "loadgroup":
        ran = [r.nodeid for kind in ("passed", "failed", "skipped") for r in terminalreporter.stats.get(kind, [])
               if isinstance(getattr(r, "nodeid", None), str) and r.nodeid.split("::", 1)[0].rsplit("/", 1)[-1]
               in XDIST_GROUPS]
        if ran and not any("@" in nodeid.rpartition("]")[2].rpartition("::")[2] for nodeid in ran):
            terminalreporter.write_line(
                "the xdist groups (XDIST_GROUPS in tests/conftest.py) were not kept on one worker: this pytest "
                "and pytest-xdist do not apply --dist loadgroup (pytest-xdist issue 1386, pytest 9.2)",
                yellow=True, bold=True)
    if missing:
        # Counted in pytest's last line too: "912 passed, 4 skipped, 107 torch tests not run".
        terminalreporter.stats.setdefault("torch tests not run", []).extend([None] * missing)
        terminalreporter.write_line(
            f"{missing} torch test{'s' if missing != 1 else ''} did not run: torch is not installed "
            "(.venv/bin/pip install torch==2.13.0, as .ci/run does)", yellow=True, bold=True)


# ---------------------------------------------------------------- running the command

@pytest.fixture
def vram():
    """`vram("status", "--json")` -> Result; the environment is clean unless `env=` is given."""
    return run_vram


# ---------------------------------------------------------------- scenarios

@pytest.fixture
def write_scenario(tmp_path):
    """write_scenario(data or text, name="s.json") -> path of a scenario file under tmp_path."""
    def write(data: Any, name: str = "scenario.json") -> Path:
        path = tmp_path / name
        path.write_text(data if isinstance(data, str) else json.dumps(data))
        return path
    return write


# ---------------------------------------------------------------- real processes

@pytest.fixture
def kill_sandbox(monkeypatch, tmp_path):
    """For the kill library's tests: no user protection list, the audit log in tmp_path, the
    simulated clock pinned."""
    for key in ("VRAM_SIMULATE", "VRAM_SIM_EPOCH", "XDG_CONFIG_HOME", "XDG_STATE_HOME"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("VRAM_SIM_TIME", "0")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("VRAM_AUDIT_LOG", str(tmp_path / "audit.log"))


@pytest.fixture
def cli(monkeypatch, tmp_path, capsys):
    """cli(*argv) -> (exit code, stdout, stderr) of `vram ARGV` run in this process, in a clean,
    private environment (simulated clock at t=0, leases, audit log and config under tmp_path)."""
    for key in list(os.environ):
        if (key.startswith("VRAM_") and key != "VRAM_LANG"
                or key in ("NO_COLOR", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER")):
            monkeypatch.delenv(key)
    monkeypatch.setenv("VRAM_SIM_TIME", "0")
    monkeypatch.setenv("VRAM_LEASE_DIR", str(tmp_path / "leases"))
    monkeypatch.setenv("VRAM_AUDIT_LOG", str(tmp_path / "audit.log"))
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))

    from vramkit.cli.main import main

    def run(*argv: str) -> tuple[int, str, str]:
        capsys.readouterr()
        rc = main(list(argv))
        out, err = capsys.readouterr()
        return rc, out, err
    return run


@pytest.fixture
def children():
    kids = Children()
    try:
        yield kids
    finally:
        kids.cleanup()


@pytest.fixture
def shared_dir():
    """A directory every user may read and write (pytest's tmp_path is root-only): scenario
    files and audit logs for vram run as another user. Removed at teardown."""
    import shutil
    import tempfile

    path = Path(tempfile.mkdtemp(prefix="vramkit-test-"))
    path.chmod(0o1777)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def strays():
    kept = Strays()
    try:
        yield kept
    finally:
        kept.cleanup()


# ---------------------------------------------------------------- vram pick / vram run: leases, launchers

@pytest.fixture
def leasing(tmp_path) -> Leasing:
    return Leasing(tmp_path / "leases")


@pytest.fixture
def groups():
    kept = Groups()
    try:
        yield kept
    finally:
        kept.cleanup()


# ---------------------------------------------------------------- vram serve

@pytest.fixture
def served():
    started: list[Served] = []

    def start(*args: str, **kw: Any) -> Served:
        """A `vram serve ARGS` process on a free port (helpers.Served); killed at teardown."""
        s = Served(*args, **kw)
        started.append(s)
        return s
    yield start
    for s in started:
        if s.proc.poll() is None:
            s.proc.kill()
            s.proc.wait()


@pytest.fixture(scope="module")
def one_torch_thread():
    """For a module of tiny torch models (`pytestmark = pytest.mark.usefixtures("one_torch_thread")`):
    a second intra-op thread only fights the other tests for the CPU (9 s -> 1 s a loop)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def sim_env(monkeypatch):
    """The simulator in-process at a pinned scenario time, untouched by the runner's environment."""
    for key in ("VRAM_SIMULATE", "VRAM_SIM_EPOCH", "NO_COLOR"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("VRAM_SIM_TIME", "0")
