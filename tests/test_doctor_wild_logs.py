"""vram doctor on logs as people save and paste them, beyond the messages themselves: a message only
quoted, TensorFlow's warning that is no failure, NCCL's own allocation failures, a PowerShell log in
UTF-16, a message hard-wrapped mid-word by a terminal, a model moved to the GPU, an allocator setting
the log shows already set, sizes under a MiB and past a TiB."""

from __future__ import annotations

import json
import re

import pytest
from helpers import clean_env, run_vram

from vramkit.doctor.explain import explain
from vramkit.doctor.oom import find_oom
from vramkit.doctor.traceback import place_of

MESSAGE = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
           "79.15 GiB of which 1.50 GiB is free. Including non-PyTorch memory, this process has 77.64 GiB memory "
           "in use. Of the allocated memory 70.00 GiB is allocated by PyTorch, and 7.00 GiB is reserved by PyTorch "
           "but unallocated. If reserved but unallocated memory is large try setting "
           "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory "
           "Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)\n")


def _placed(log: str):
    """The log's message, and where its traceback says it failed."""
    report = find_oom(log)
    assert report is not None and report.offset is not None
    return report, place_of(log, report.offset, report.kind)


def _doctor(log: str, tmp_path, *args: str, encoding: str = "utf-8"):
    path = tmp_path / "train.log"
    path.write_bytes(log.encode(encoding))
    return run_vram("doctor", str(path), "--no-live", *args, env=clean_env(COLUMNS="120"))


def test_a_quoted_message_or_a_warning_that_says_it_is_no_failure_is_no_oom():
    tip = '[INFO] Tip: if you see "CUDA out of memory. Tried to allocate", lower --batch-size\nepoch 1 done\n'
    tf = ("W tensorflow/tsl/framework/bfc_allocator.cc:296] Allocator (GPU_0_bfc) ran out of memory trying to "
          "allocate 2.19GiB with freed_by_count=0. The caller indicates that this is not a failure, but this may "
          "mean that there could be performance gains if more memory were available.\nTest accuracy: 0.7055\n")
    assert find_oom(tip) is None and find_oom(tf) is None
    # the same words raised are an error: after a tip, the message that killed the job is read
    report = find_oom(tip + "Traceback (most recent call last):\n" + MESSAGE)
    assert report is not None and report.requested_bytes == 2 * 1024**3


def test_nccls_own_allocation_failures_are_out_of_memory():
    warn = ("node1:2871:2990 [1] include/alloc.h:103 NCCL WARN Failed to CUDA calloc 6291456 bytes\n"
            "[rank1]: torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled "
            "cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.20.5\n"
            "[rank1]: Last error:\n[rank1]: Failed to CUDA calloc 6291456 bytes\n")
    report = find_oom(warn)
    assert report is not None and report.kind == "cuda-runtime" and report.requested_bytes == 6291456
    failure = "misc/cudawrap.cc:188 NCCL WARN Cuda failure 'out of memory'\nRuntimeError: NCCL Error 1\n"
    assert find_oom(failure) is not None


def test_more_than_an_exabyte_is_a_bug_not_a_memory_problem(tmp_path):
    report = find_oom("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate more than 1EB memory.\n")
    assert report is not None and report.requested_bytes == 2**60
    assert explain(report).cause == "not_memory"
    result = _doctor("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate more than 1EB memory.\n", tmp_path)
    assert result.rc == 0 and "asked for  1.00EiB" in result.out


def test_a_powershell_log_in_utf16_reads_as_the_same_log(tmp_path):
    log = "Loading weights\r\nTraceback (most recent call last):\r\n" + MESSAGE.replace("\n", "\r\n")
    utf8 = _doctor(log, tmp_path, "--json")
    for encoding in ("utf-16", "utf-16-le"):  # with its byte-order mark (PowerShell 5.1's `>`), and without
        utf16 = _doctor(log, tmp_path, "--json", encoding=encoding)
        assert utf16.rc == utf8.rc == 0, utf16.err
        assert json.loads(utf16.out) == json.loads(utf8.out)


# Every form with sizes, as raised (1.x: RuntimeError; 2.1: the "capacty" typo and two other processes)
FORMS_WITH_SIZES = {
    "2.2+": MESSAGE,
    "2.1": "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.53 GiB. GPU 3 has a total capacty of "
           "39.39 GiB of which 1.05 GiB is free. Process 4321 has 12.00 GiB memory in use. Process 5555 has 26.33 GiB "
           "memory in use. Of the allocated memory 24.11 GiB is allocated by PyTorch, and 1.70 GiB is reserved by "
           "PyTorch but unallocated. If reserved but unallocated memory is large try setting max_split_size_mb to "
           "avoid fragmentation.  See documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF\n",
    "1.4-2.0": "RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 1; 15.78 GiB total capacity; "
               "14.21 GiB already allocated; 3.19 MiB free; 14.56 GiB reserved in total by PyTorch) If reserved "
               "memory is >> allocated memory try setting max_split_size_mb to avoid fragmentation.  See "
               "documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF\n",
    "1.0-1.3": "RuntimeError: CUDA out of memory. Tried to allocate 244.00 MiB (GPU 2; 11.17 GiB total capacity; "
               "10.34 GiB already allocated; 183.81 MiB free; 304.88 MiB cached)\n",
}
_FIELDS = ("requested_bytes", "total_bytes", "free_bytes", "process_bytes", "allocated_bytes", "reserved_bytes",
           "reserved_unallocated_bytes", "device", "form", "exception")


def _facts(report) -> dict:
    assert report is not None
    return {**{f: getattr(report, f) for f in _FIELDS}, "processes": [(p.pid, p.bytes) for p in report.processes]}


@pytest.mark.parametrize("form", FORMS_WITH_SIZES)
def test_a_message_hard_wrapped_at_any_terminal_width_keeps_its_numbers(form):
    """A terminal cuts a line every W columns, through words and numbers ("14.2" / "1 GiB already
    allocated": the cut's second half alone is another number); copied from it, each width reads as the
    message does whole. With a logger's prefix, the cut may fall in the message's first words too."""
    message = FORMS_WITH_SIZES[form]
    for prefix in ("", "2024-05-01 12:00:03,117 ERROR train.py:88 "):
        flat = prefix + " ".join(message.split())
        whole = _facts(find_oom("Traceback (most recent call last):\n  File \"t.py\", line 1\n" + flat + "\n"))
        assert whole["requested_bytes"] and whole["device"] is not None and whole["form"] == form
        for width in range(40, 200):
            wrapped = "\n".join(flat[i:i + width] for i in range(0, len(flat), width))
            log = "Traceback (most recent call last):\n  File \"t.py\", line 1\n" + wrapped + "\nepoch 3\n"
            assert _facts(find_oom(log)) == whole, (form, prefix, width)
    flat = " ".join(MESSAGE.split())
    wrapped = "\n".join(flat[i:i + 80] for i in range(0, len(flat), 80))
    assert re.search(r"[a-z]\n[a-z]", wrapped)  # a word cut in two: the cause is read as from the whole message
    assert explain(find_oom(wrapped)).cause == explain(find_oom(MESSAGE)).cause == "fragmentation"


def test_a_message_with_every_process_of_a_shared_gpu_is_read_whole():
    """Forty "Process P has 1.00 GiB" parts (a shared GPU, DataLoader workers that opened CUDA): every
    one is read, and the allocator's figures after them."""
    parts = " ".join(f"Process {100000 + 37 * i} has 1.00 GiB memory in use." for i in range(40))
    message = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 2 has a total capacity of "
               "47.53 GiB of which 1.06 GiB is free. " + parts + " Including non-PyTorch memory, this process has "
               "5.47 GiB memory in use. Of the allocated memory 1.12 GiB is allocated by PyTorch, and 3.84 GiB is "
               "reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting "
               "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for "
               "Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)\n")
    report = find_oom(message)
    assert report is not None and len(report.processes) == 40 and report.process_bytes == round(5.47 * 2**30)
    assert report.reserved_unallocated_bytes == round(3.84 * 2**30)
    assert explain(report).cause == "fragmentation"


def test_a_message_a_logger_quotes_with_its_figures_is_raised_not_a_tip(tmp_path):
    """A caught exception's repr and a JSON log's field quote the message whole, figures and all: that
    is the error, where a tip quotes only its first words."""
    flat = " ".join(MESSAGE.split()).removeprefix("torch.OutOfMemoryError: ")
    repr_log = f"2024-05-01 12:00:00 ERROR worker failed: OutOfMemoryError({flat!r})\n"
    json_log = json.dumps({"level": "error", "msg": "request failed", "error": flat}) + "\n"
    for log, exception in ((repr_log, "OutOfMemoryError"), (json_log, None)):
        report = find_oom(log)
        assert report is not None and report.requested_bytes == 2 * 2**30 and report.exception == exception
    assert find_oom('[INFO] Tip: if you see "CUDA out of memory. Tried to allocate", lower --batch-size\n') is None
    assert _doctor(repr_log, tmp_path).rc == 0


def test_the_runtime_forms_of_rocm_and_the_driver_api_and_tensorflow_2s_eager_op(tmp_path):
    hip = ("RuntimeError: HIP error: out of memory\nHIP kernel errors might be asynchronously reported at some "
           "other API call, so the stacktrace below might be incorrect.\n"
           "For debugging consider passing AMD_SERIALIZE_KERNEL=3\n")
    report = find_oom(hip)
    assert report is not None and report.kind == "hip-runtime" and report.form == "runtime"
    result = _doctor(hip, tmp_path)
    assert result.rc == 0 and result.out.startswith("HIP (ROCm) out of memory")
    driver = find_oom("RuntimeError: CUDA driver error: out of memory\n")
    assert driver is not None and driver.kind == "cuda-runtime"
    tf = ("2024-05-01 12:00:00.000000: W tensorflow/tsl/framework/bfc_allocator.cc:485] Allocator (GPU_0_bfc) ran out "
          "of memory trying to allocate 1.00GiB (rounded to 1073741824)requested by op MatMul\n"
          "Traceback (most recent call last):\n  File \"fit.py\", line 9, in <module>\n    y = tf.matmul(a, b)\n"
          "tensorflow.python.framework.errors_impl.ResourceExhaustedError: {{function_node "
          "__wrapped__MatMul_device_/job:localhost/replica:0/task:0/device:GPU:1}} failed to allocate memory "
          "[Op:MatMul]\n")
    report = find_oom(tf)
    assert report is not None and (report.kind, report.device, report.requested_bytes) == ("tensorflow", 1, 2**30)


def test_xla_s_request_in_a_unit_is_read():
    report = find_oom("jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to "
                      "allocate 40.50GiB.\n")
    assert report is not None and report.kind == "xla" and report.requested_bytes == round(40.5 * 2**30)


def test_one_listed_process_smaller_than_what_pytorch_reserved_is_not_the_job():
    report = find_oom("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 896.00 MiB. GPU 0 has a total "
                      "capacity of 23.69 GiB of which 512.06 MiB is free. Process 2811 has 6.12 GiB memory in use. Of "
                      "the allocated memory 15.82 GiB is allocated by PyTorch, and 850.11 MiB is reserved by PyTorch "
                      "but unallocated.\n")
    ex = explain(report)
    assert ex.job_pid is None and ex.cause != "other_processes"


def test_the_markers_a_log_repeats_are_found_as_the_pattern_finds_them():
    """_starts tries the pattern only around its literal words: on logs full of them (a training line
    with "out of memory" or "GPU memory" every step), what it finds is what a search of the whole text finds."""
    from vramkit.doctor.oom import _START, _starts

    pieces = ["out of memory ", "CUDA out of memory. ", "Resource exhausted: Out of memory allocating 2 bytes",
              "peak GPU memory: 71.23 GiB ", "Cannot malloc 12.5 MB GPU memory", "x" * 300, "\n",
              "THCudaCheck FAIL file=/a/b.cu line=12 error=2 : out of memory", "failed to allocate ",
              "cuMemAllocAsync failed to allocate 123 bytes", "Cuda failure 'out of memory'"]
    for n in range(1, 400):
        text = "".join(pieces[(n * 7 + i * i) % len(pieces)] for i in range(n % 37 + 1))
        assert [m.span() for m in _starts(text)] == [m.span() for m in _START.finditer(text)], text


def test_a_model_moved_to_the_gpu_gets_the_weights_fixes_not_the_batchs():
    log = ("Traceback (most recent call last):\n"
           '  File "eval.py", line 57, in <module>\n'
           "    model = models.resnet152(pretrained=True).cuda()\n"
           '  File "/usr/lib/python3/dist-packages/torch/nn/modules/module.py", line 260, in cuda\n'
           "    return self._apply(lambda t: t.cuda(device))\n"
           '  File "/usr/lib/python3/dist-packages/torch/nn/modules/module.py", line 187, in _apply\n'
           "    module._apply(fn)\n"
           '  File "/usr/lib/python3/dist-packages/torch/nn/modules/module.py", line 260, in <lambda>\n'
           "    return self._apply(lambda t: t.cuda(device))\n"
           "RuntimeError: CUDA error: out of memory\n")
    report, phase = _placed(log)
    assert phase is not None and phase.id == "to_device"
    fixes = [f.id for f in explain(report, phase=phase).fixes]
    assert fixes[:2] == ["load_order", "half_weights"] and "halve_batch" not in fixes


def test_an_allocator_setting_the_log_shows_set_is_not_offered_again(tmp_path):
    before = "export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True\nstep 1\nTraceback (most recent call last):\n"
    report = find_oom(before + MESSAGE)
    assert report is not None and report.alloc_conf == "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
    ex = explain(report)
    assert "alloc_conf" not in [f.id for f in ex.fixes]
    assert any("already set" in note for note in ex.notes)
    # PyTorch's own advice in an earlier message ("try setting ...") is no setting the job had
    again = find_oom(MESSAGE + "\nretrying with a smaller batch\n" + MESSAGE)
    assert again is not None and again.alloc_conf is None
    assert [f.id for f in explain(again).fixes][0] == "alloc_conf"


def test_sizes_under_a_mib_are_not_shown_as_zero(tmp_path):
    small = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 512.00 KiB. GPU 0 has a total capacity "
             "of 23.65 GiB of which 0 bytes is free. Process 1833 has 21.00 GiB memory in use. Including non-PyTorch "
             "memory, this process has 2.50 GiB memory in use. Of the allocated memory 2.00 GiB is allocated by "
             "PyTorch, and 1.50 MiB is reserved by PyTorch but unallocated.\n")
    result = _doctor(small, tmp_path)
    assert result.rc == 0, result.err
    assert "asked for  512.00KiB" in result.out and "short by 512.00KiB" in result.out
    assert not re.search(r"(?<![0-9.])0MiB", result.out)
    assert "1.50MiB reserved-unallocated" in result.out


# A forward pass under no_grad: a script's decorated function, and a notebook cell (IPython 8 keeps the
# cell, the no_grad decorator and the attention's helper in a model library's modeling code)
NO_GRAD_SCRIPT = ("Traceback (most recent call last):\n"
    '  File "gen.py", line 12, in <module>\n'
    "    image = run(prompt)\n"
    '  File "/srv/venv/lib/python3.11/site-packages/torch/utils/_contextlib.py", line 116, in decorate_context\n'
    "    return func(*args, **kwargs)\n"
    '  File "gen.py", line 8, in run\n'
    "    return model(tokens)\n"
    '  File "/srv/venv/lib/python3.11/site-packages/torch/nn/modules/module.py", line 1747, in _call_impl\n'
    "    return forward_call(*args, **kwargs)\n"
    + MESSAGE.replace("7.00 GiB is reserved", "7.00 MiB is reserved"))
NO_GRAD_NOTEBOOK = ("OutOfMemoryError                          Traceback (most recent call last)\n"
    "Cell In[12], line 3\n"
    "----> 3 image = pipe(prompt, height=1024, width=1024).images[0]\n\n"
    "File /usr/lib/python3.10/site-packages/torch/utils/_contextlib.py:115, in "
    "context_decorator.<locals>.decorate_context(*args, **kwargs)\n"
    "--> 115         return func(*args, **kwargs)\n\n"
    "File /usr/lib/python3.10/site-packages/diffusers/models/attention_processor.py:615, in "
    "Attention.get_attention_scores(self, query, key, attention_mask)\n"
    "--> 615     baddbmm_input = torch.empty(\n\n"
    + MESSAGE.replace("torch.OutOfMemoryError", "OutOfMemoryError").replace("7.00 GiB is reserved",
                                                                             "7.00 MiB is reserved"))


@pytest.mark.parametrize("log", [NO_GRAD_SCRIPT, NO_GRAD_NOTEBOOK], ids=["script", "notebook"])
def test_inference_under_no_grad_gets_no_training_fixes(log):
    report, phase = _placed(log)
    assert phase is not None and phase.id == "forward" and phase.grad_off and not phase.training
    fixes = [f.id for f in explain(report, phase=phase).fixes]
    assert fixes[0] == "infer_batch", fixes
    assert not {"checkpointing", "grad_accum", "offload_optimizer", "no_grad"} & set(fixes)


GENERATE_TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "/srv/app/worker.py", line 245, in generate_stream\n'
    "    output_ids = model.generate(**inputs)\n"
    '  File "/usr/lib/python3.10/site-packages/transformers/generation/utils.py", line 1622, in generate\n'
    "    result = self._sample(input_ids, **model_kwargs)\n"
    '  File "/usr/lib/python3.10/site-packages/transformers/cache_utils.py", line 136, in update\n'
    "    self.key_cache[layer_idx] = torch.cat([self.key_cache[layer_idx], key_states], dim=-2)\n")


def _prefixed(prefix_of) -> str:
    lines = (GENERATE_TRACEBACK + " ".join(MESSAGE.split()) + "\n").splitlines(keepends=True)
    return "".join(prefix_of(i) + line for i, line in enumerate(lines))


def test_a_launchers_or_a_runners_prefix_on_every_line_keeps_the_traceback(tmp_path):
    """srun --label's "1: " (the other rank's lines between), Ray's "(Worker pid=..., ip=...) ", a CI
    runner's timestamps, and Docker's json-file log (a JSON object a line)."""
    srun = "".join(f"1: {line}0: step 20\n" for line in _prefixed(lambda i: "").splitlines(keepends=True))
    ray = _prefixed(lambda i: f"(RayWorkerWrapper pid={27331 + i % 2}, ip=10.0.3.7) ")
    runner = _prefixed(lambda i: f"2025-03-10T15:07:20.{1000037 + i}Z ")
    docker = "".join(json.dumps({"log": line, "stream": "stderr", "time": "2024-04-27T10:13:05.000000000Z"}) + "\n"
                     for line in _prefixed(lambda i: "").splitlines(keepends=True))
    for name, log in (("srun", srun), ("ray", ray), ("runner", runner), ("docker", docker)):
        result = _doctor(log, tmp_path, "--json")
        assert result.rc == 0, (name, result.err)
        data = json.loads(result.out)
        assert data["phase"] is not None and data["phase"]["id"] == "generate", (name, data["phase"])
        assert data["requested_bytes"] == 2 * 1024**3, name
        assert data["rank"] == (1 if name == "srun" else None), name
    torchrun = _prefixed(lambda i: "[rank3]: ")
    result = _doctor(torchrun, tmp_path)
    assert result.rc == 0 and result.out.startswith("CUDA out of memory on GPU 0 (rank 3)"), result.out


def test_the_message_ends_where_pytorchs_does_not_at_the_next_lines(tmp_path):
    after = ("  0%|          | 3/1000 [00:04<22:11,  1.34s/it]\n"
             "E1203 10:00:01.123000 281 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: 1)\n")
    result = _doctor("Traceback (most recent call last):\n" + MESSAGE + after, tmp_path, "--json")
    message = json.loads(result.out)["message"]
    assert message.endswith("#environment-variables)") and "exitcode" not in message


def test_vllms_own_numbers_for_a_context_too_long_lead():
    log = ("INFO 08-14 03:22:18 [gpu_worker.py:276] Available KV cache memory: 9.45 GiB\n"
           "ERROR 08-14 03:22:19 [core.py:700] ValueError: To serve at least one request with the models's max seq "
           "len (131072), (16.00 GiB KV cache is needed, which is larger than the available KV cache memory "
           "(9.45 GiB). Based on the available memory, the estimated maximum model length is 77392. Try increasing "
           "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.\n")
    report = find_oom(log)
    assert report is not None and report.kind == "vllm"
    assert (report.requested_bytes, report.free_bytes, report.max_length) == (16 * 1024**3, round(9.45 * 1024**3),
                                                                             77392)
    lead = explain(report).fixes[0]
    assert lead.id == "vllm_max_model_len" and "--max-model-len 77392" in lead.how and lead.enough


def test_a_message_cut_before_its_split_says_fragmentation_cannot_be_ruled_out():
    cut = MESSAGE[:MESSAGE.index("Of the allocated memory") + len("Of the allocated memory 70")]
    report = find_oom(cut + "\n")
    assert report is not None and report.form == "2.2+" and report.reserved_unallocated_bytes is None
    assert any("cut short" in note for note in explain(report).notes)
    assert not any("cut short" in note for note in explain(find_oom(MESSAGE)).notes)


def test_the_jobs_parts_add_up_where_the_job_is_a_process_of_the_message(tmp_path):
    """In a container the job is one of the message's "Process P has" parts: its memory outside
    PyTorch is that part less what PyTorch reserved, not left out."""
    container = MESSAGE.replace("Including non-PyTorch memory, this process has 77.64 GiB memory in use.",
                                "Process 21493 has 77.64 GiB memory in use.")
    report = find_oom(container)
    assert report is not None and report.non_pytorch_bytes is None
    ex = explain(report)
    assert ex.job_pid == 21493 and ex.non_pytorch_bytes == round(77.64 * 1024**3) - 77 * 1024**3
    result = _doctor(container, tmp_path)
    parts = "77.64GiB = 70.00GiB allocated + 7.00GiB reserved-unallocated + 655.36MiB non-PyTorch"
    assert parts in result.out, result.out


def test_raising_a_per_process_cap_saves_at_most_what_the_gpu_has_free():
    capped = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
              "79.15 GiB of which 10.00 GiB is free. 19.79 GiB allowed; Including non-PyTorch memory, this process "
              "has 19.50 GiB memory in use. Of the allocated memory 18.90 GiB is allocated by PyTorch, and 100.00 MiB "
              "is reserved by PyTorch but unallocated.\n")
    report = find_oom(capped)
    assert report is not None
    ex = explain(report)
    cap = next(f for f in ex.fixes if f.id == "raise_cap")
    assert ex.cause == "memory_cap" and cap.saves_bytes == 10 * 1024**3


def test_the_older_forms_outside_pytorch_figure_counts_the_jobs_own_cuda_context():
    """PyTorch 1.0-2.0 print no process list: what is neither free nor PyTorch's holds the job's own CUDA
    context too. On a small GPU that is no evidence of other processes; well past it, it is, and doctor
    says where to look for them."""
    def old(total: str, allocated: str, free: str, cached: str) -> str:
        return (f"RuntimeError: CUDA out of memory. Tried to allocate 26.00 MiB (GPU 0; {total} total capacity; "
                f"{allocated} already allocated; {free} free; {cached} cached)\n")

    small = find_oom(old("1.00 GiB", "436.00 MiB", "24.00 MiB", "26.00 MiB"))  # 538 MiB outside PyTorch
    assert small is not None and explain(small).cause == "own_usage"
    shared = explain(find_oom(old("10.92 GiB", "436.00 MiB", "24.00 MiB", "26.00 MiB")))  # 10.4 GiB outside
    assert shared.cause == "other_processes" and "check_gpu" in [f.id for f in shared.fixes]


def test_torchruns_failure_summary_names_the_rank_whose_message_it_shows():
    """torchrun's summary of a failed run (@record) shows a failed rank's traceback and message in a
    block of its own, unprefixed: the block's "rank : 3" is the message's rank."""
    summary = ("torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n"
               "============================================================\ntrain.py FAILED\n"
               "------------------------------------------------------------\nFailures:\n[1]:\n"
               "  time      : 2024-05-01_12:05:11\n  host      : gpu-node-7\n  rank      : 3 (local_rank: 3)\n"
               "  exitcode  : 1 (pid: 2004)\n  traceback : Traceback (most recent call last):\n"
               '    File "/home/bob/train.py", line 190, in main\n      optimizer.step()\n  ' + MESSAGE +
               "------------------------------------------------------------\nRoot Cause (first observed failure):\n"
               "[0]:\n  time      : 2024-05-01_12:05:11\n  rank      : 0 (local_rank: 0)\n")
    report = find_oom(summary)
    assert report is not None and report.rank == 3
    assert find_oom("Traceback (most recent call last):\n" + MESSAGE).rank is None


@pytest.mark.parametrize("prefix, rank", [("[2024-05-01 12:00:00,123] [ERROR] [rank5]: ", 5),  # DeepSpeed's logger
                                          ("node003: ", None)])  # pdsh's host, on a multi-node DeepSpeed run
def test_a_launchers_or_loggers_prefix_is_followed_to_the_traceback_and_the_rank(prefix, rank):
    log = "".join(prefix + line + "\n" for line in (
        "Traceback (most recent call last):", '  File "train.py", line 10, in <module>', "    loss.backward()",
        MESSAGE.rstrip("\n")))
    report, phase = _placed(log)
    assert report.rank == rank and report.requested_bytes == 2 * 2**30
    assert phase is not None and phase.id == "backward", phase


def test_mpiruns_tagged_output_is_followed_for_the_messages_own_rank():
    """mpirun --tag-output (Horovod's launcher): "[job,rank]<stderr>:" on every line, ranks interleaved;
    the message's rank is read and only its own lines make its traceback."""
    five, two = "[1,5]<stderr>:", "[1,2]<stderr>:"
    log = "".join(line + "\n" for line in (
        "[1,2]<stdout>:epoch 3 step 100 loss 1.23", five + "Traceback (most recent call last):",
        two + "Traceback (most recent call last):", five + '  File "train.py", line 10, in <module>',
        two + '  File "train.py", line 30, in <module>', five + "    loss.backward()", two + "    optimizer.step()",
        five + MESSAGE.rstrip("\n")))
    report, phase = _placed(log)
    assert report.rank == 5 and phase is not None and phase.id == "backward", phase


def test_vllms_profiling_forward_is_not_told_to_take_a_larger_share_of_the_gpu():
    """An OOM in vLLM's profiling forward (before the KV cache is sized): the weights and one forward did
    not fit the GPU itself. A larger --gpu-memory-utilization (it sizes the KV cache after) or
    --enforce-eager (graphs are captured later) cannot help; a shorter context or smaller weights can."""
    frames = ("ERROR 05-01 09:01:12 worker_base.py:145] Traceback (most recent call last):\n"
              'ERROR 05-01 09:01:12 worker_base.py:145]   File "/usr/local/lib/python3.10/dist-packages/vllm/worker/'
              'worker.py", line 161, in determine_num_available_blocks\n'
              "ERROR 05-01 09:01:12 worker_base.py:145]     self.model_runner.profile_run()\n"
              'ERROR 05-01 09:01:12 worker_base.py:145]   File "/usr/local/lib/python3.10/dist-packages/vllm/'
              'model_executor/layers/fused_moe/fused_moe.py", line 450, in fused_experts\n'
              "ERROR 05-01 09:01:12 worker_base.py:145]     intermediate_cache1 = torch.empty((M, topk, N))\n")
    log = ("INFO 05-01 09:00:00 llm_engine.py:100] Initializing an LLM engine (v0.4.2) with config: model='x'\n"
           + frames + "ERROR 05-01 09:01:12 worker_base.py:145] " + MESSAGE)
    report, phase = _placed(log)
    assert report.framework == "vllm" and phase is not None and phase.id == "kv_cache"
    fixes = [f.id for f in explain(report, phase=phase).fixes]
    assert [f for f in fixes if f.startswith("vllm")] == ["vllm_max_model_len", "vllm_smaller_weights"], fixes
