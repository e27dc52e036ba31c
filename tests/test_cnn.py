"""CNN baselines: config, data, the public API, and real training runs in fresh processes."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import numpy as np
import pytest

from sciml_bench.cnn import (
    PRESETS,
    CNNConfig,
    jobs,
    run_variant,
    variants,
)
from sciml_bench.cnn.data import digits, init_params, synthetic
from sciml_bench.cnn.train_loop import (
    RECORD_FIELDS,
    Unavailable,
    chance_margin,
    resolve_device,
)
from sciml_bench.measure.memory import Nvml, ResourceSampler, gpu_count
from sciml_bench.run.runner import run_job_once as run_in_fresh_process

# ---------------------------------------------------------------- config and jobs


def test_gpu_preset_mirrors_apx():
    g = PRESETS["gpu"]
    assert (g.image_size, g.channels, g.batch_size) == (224, 3, 32)
    assert (g.steps_per_epoch, g.epochs, g.warmup_epochs) == (100, 5, 1)


def test_config_round_trip_and_overrides():
    cfg = PRESETS["quick"]
    assert CNNConfig.from_json(json.loads(json.dumps(cfg.to_json()))) == cfg
    assert cfg.with_overrides({"batch_size": 8, "conv_channels": [4, 4]}).conv_channels == (4, 4)
    with pytest.raises(ValueError, match="unknown CNN config"):
        cfg.with_overrides({"batchsize": 8})
    with pytest.raises(ValueError, match="too small"):
        cfg.with_overrides({"image_size": 2})


def test_jobs_are_json_and_share_one_config():
    js = jobs(quick=True, device="cpu")
    assert [j["variant"] for j in js] == list(variants())
    assert all(j["kind"] == "cnn" and j["device"] == "cpu" for j in js)
    assert len({json.dumps(j["config"], sort_keys=True) for j in js}) == 1
    json.dumps(js)
    d = jobs(quick=True, dataset="digits", overrides={"epochs": 1})[0]["config"]
    assert (d["image_size"], d["channels"], d["epochs"]) == (8, 1, 1)
    assert jobs(quick=False, device="cuda")[0]["preset"] == "gpu"
    with pytest.raises(ValueError):
        jobs(quick=True, device="tpu")


# ---------------------------------------------------------------- data


def test_synthetic_is_deterministic_and_learnable():
    cfg = PRESETS["quick"]
    a, b = synthetic(cfg), synthetic(cfg)
    assert np.array_equal(a.x_train, b.x_train) and np.array_equal(a.y_eval, b.y_eval)
    assert a.x_train.shape == (cfg.images_per_epoch, 16, 16, 1)
    assert a.x_train.dtype == np.float32 and a.y_train.dtype == np.int32
    # nearest class mean (from the training split) classifies the held-out split well
    means = np.stack([a.x_train[a.y_train == k].mean(0) for k in range(cfg.n_classes)])
    d = ((a.x_eval[:, None] - means[None]) ** 2).sum(axis=(2, 3, 4))
    assert (d.argmin(1) == a.y_eval).mean() > 0.8


def test_digits_split():
    pytest.importorskip("sklearn", reason="scikit-learn is not installed: pip install '.[digits]'")
    cfg = jobs(quick=True, dataset="digits")[0]["config"]
    ds = digits(CNNConfig.from_json(cfg))
    assert ds.x_train.shape[1:] == (8, 8, 1)
    assert len(ds.x_train) == cfg["batch_size"] * cfg["steps_per_epoch"]
    assert len(ds.y_eval) <= 1797 // 5


def test_init_params_follow_architecture():
    cfg = PRESETS["quick"]
    p = init_params(cfg)
    assert [w.shape for w in p["conv_w"]] == [(8, 1, 3, 3), (16, 8, 3, 3)]
    assert p["dense_w"][0].shape == (32, 16 * 4 * 4)
    assert all(not b.any() for b in p["conv_b"] + p["dense_b"])


# ---------------------------------------------------------------- public API without training


def test_variants_import_no_framework():
    code = (
        "import sys; from sciml_bench.cnn import variants, jobs; variants(); jobs(True);"
        "print(sorted(m for m in ('torch', 'jax', 'tensorflow') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_missing_framework_is_unavailable_with_fix(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda n, *a: None if n == "tensorflow" else real(n, *a)
    )
    info = variants()["tensorflow"]
    assert not info.available and "tensorflow" in info.reason
    rec = run_variant(next(j for j in jobs(True) if j["variant"] == "tensorflow"))
    assert rec["status"] == "unavailable"
    assert rec["fix"] == "pip install -c constraints.txt -e '.[tensorflow]'"
    assert set(RECORD_FIELDS) <= set(rec)
    # the table's note under the row says how to fix it, as an ODE backend's does
    from sciml_bench.results.table import table

    assert "Fix: pip install -c constraints.txt -e '.[tensorflow]'" in " ".join(
        table([{**rec, "kind": "cnn", "problem": "cnn"}]).split()
    )


def test_errors_are_records_not_exceptions():
    job = {**jobs(True)[0], "config": {"bogus": 1}}
    rec = run_variant(job)
    assert rec["status"] == "error" and rec["reason"].startswith("TypeError")
    rec = run_variant({**jobs(True)[0], "variant": "mxnet"})
    assert rec["status"] == "error" and "unknown CNN variant" in rec["reason"]


def test_no_silent_gpu_fallback():
    with pytest.raises(Unavailable):
        resolve_device("cuda", False, "torch 0+cpu", "fix")
    assert resolve_device("cpu", True, "torch", "fix") == ("cpu", "")
    device, note = resolve_device("auto", False, "torch 0+cpu", "fix")
    assert device == "cpu" and (note == "" if gpu_count() == 0 else "ran on CPU" in note)


def test_chance_margin():
    assert chance_margin(0.1, 10_000) == 0.05
    assert chance_margin(0.1, 100) == pytest.approx(0.09)


def test_resource_sampler():
    with ResourceSampler(interval=0.01) as s:
        _ = np.ones(5_000_000)
    assert s.rss_peak_mb > 0 and s.ram_max_mb >= s.rss_peak_mb
    assert (Nvml.open() is None) == (gpu_count() == 0)


# ---------------------------------------------------------------- real training, fresh processes


@pytest.fixture(scope="module")
def quick_records() -> dict[str, dict]:
    """Every installed variant trained once, quick size, CPU, each in its own process."""
    out = {}
    for job in jobs(quick=True, device="cpu"):
        if variants()[job["variant"]].available:
            out[job["variant"]] = run_in_fresh_process(job)
    return out


POSITIVE = (
    "import_s", "setup_s", "time_to_first_step_s", "cold_start_s", "warmup_epoch_s",
    "train_s", "throughput_ips", "accuracy", "ram_initial_mb", "ram_max_mb",
)  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("name", list(variants()))
def test_variant_trains_on_cpu(name, quick_records):
    info = variants()[name]
    if not info.available:
        pytest.skip(f"{name}: {info.reason}")
    rec = quick_records[name]
    assert rec["status"] == "ok", rec["reason"]
    assert set(RECORD_FIELDS) <= set(rec)
    assert rec["problem"] == "cnn" and rec["backend"] == name and rec["device"] == "cpu"
    for value in rec.values():  # flat: scalars, lists of numbers, or dicts of scalars
        if isinstance(value, list):
            assert all(isinstance(v, int | float) for v in value)
    for key in POSITIVE:
        assert rec[key] > 0, key
    assert len(rec["epoch_s"]) == rec["epochs"] and all(t > 0 for t in rec["epoch_s"])
    assert not rec["trained_to_chance"]
    assert rec["accuracy"] > rec["chance_accuracy"] + 0.3
    assert rec["final_loss"] < rec["initial_loss"]
    assert rec["ram_max_mb"] >= rec["ram_initial_mb"]
    assert rec["vram_max_mb"] is None and rec["energy_j"] is None  # CPU run: no GPU figures
    assert rec["settings"]["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false"
    assert rec["settings"]["preimported"] == ""
    json.dumps(rec)


@pytest.mark.slow
def test_variants_start_from_the_same_model(quick_records):
    """Same NumPy init loaded everywhere: the initial held-out loss agrees to float32 noise."""
    losses = {n: r["initial_loss"] for n, r in quick_records.items() if r["status"] == "ok"}
    if len(losses) < 2:
        pytest.skip("fewer than two variants ran")
    ref = next(iter(losses.values()))
    for name, loss in losses.items():
        assert loss == pytest.approx(ref, rel=1e-4), name


@pytest.mark.slow
def test_rows_record_their_threads_load_and_device(quick_records):
    """Issue 23 B and E: without --threads a variant gets the free cores when its
    executor's first CNN worker starts (here each variant has its own executor; a run's
    variants share one) and uses them (torch's threads, XLA's pool counted from
    outside); the load it was decided at and other processes' CPU during the run are
    recorded, an oversubscribed row says so; the device is read back from the weights."""
    from sciml_bench.cnn.train_loop import oversubscription

    ok = {n: r for n, r in quick_records.items() if r["status"] == "ok"}
    if not ok:
        pytest.skip("no CNN variant ran")
    for name, r in ok.items():
        assert 1 <= r["threads"] <= r["cores"], name
        assert r["threads_source"].startswith("free cores at start"), name
        assert r["load_start"] >= 0 and r["others_cpu"] >= 0, name
        assert r["oversubscribed"] == bool(oversubscription(r)), name
        assert ("machine oversubscribed" in r["reason"]) == r["oversubscribed"], name
        assert r["device"] == "cpu" and r["concurrent_cases"] >= 1, name
    if "torch-eager" in ok:
        assert ok["torch-eager"]["settings"]["torch_threads"] == ok["torch-eager"]["threads"]
    if "jax" in ok:
        assert ok["jax"]["xla_threads"] == ok["jax"]["threads"]


def test_the_device_is_read_back_from_the_weights():
    """A row's device is where the framework reports the parameters are, not the one the
    trainer chose: parameters moved elsewhere make the row an error naming both."""
    pytest.importorskip("torch")
    from sciml_bench.cnn.data import make_dataset
    from sciml_bench.cnn.torch import build_eager
    from sciml_bench.cnn.train_loop import check_device

    cfg = CNNConfig.from_json(jobs(quick=True, device="cpu")[0]["config"])
    trainer = build_eager(cfg, make_dataset(cfg, "synthetic"), "cpu")
    rec = {"backend": "torch-eager"}
    check_device(trainer, rec, "setup")
    assert rec["device"] == "cpu"
    trainer.model.to("meta")
    with pytest.raises(RuntimeError, match="device mismatch after training: asked for cpu, "
                       "the library reports meta"):  # fmt: skip
        check_device(trainer, rec, "training")


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.skipif(gpu_count() == 0, reason="no NVIDIA GPU (NVML sees none)")
@pytest.mark.parametrize("name", ["torch-eager", "jax"])
def test_variant_uses_the_gpu(name):
    info = variants()[name]
    if not info.available:
        pytest.skip(f"{name}: {info.reason}")
    job = next(j for j in jobs(quick=True, device="cuda") if j["variant"] == name)
    rec = run_in_fresh_process(job)
    if rec["status"] == "unavailable":
        pytest.skip(rec["reason"])  # e.g. a CPU-only build; the record says why
    assert rec["status"] == "ok", rec["reason"]
    assert rec["device"] == "cuda"
    assert rec["vram_max_mb"] is not None and rec["alloc_peak_mb"] > 0


# ---------------------------------------------------------------- second wave: options


def test_old_config_reads_and_new_options_validate():
    """A first-wave config (no second-wave keys) loads with today's meaning."""
    old = {k: v for k, v in PRESETS["quick"].to_json().items()
           if k not in ("model", "pipeline", "precision", "target_accuracy", "eval_every",
                        "inference_calls", "inference_batch", "loader_workers",
                        "resnet_widths", "resnet_blocks", "bn_momentum", "bn_eps")}  # fmt: skip
    cfg = CNNConfig.from_json(old)
    assert (cfg.model, cfg.pipeline, cfg.precision, cfg.tf32) == ("small", "device", "tf32", True)
    for bad in ({"pipeline": "disk"}, {"precision": "fp16"}, {"model": "vgg"},
                {"target_accuracy": 1.5}):  # fmt: skip
        with pytest.raises(ValueError):
            cfg.with_overrides(bad)
    with pytest.raises(ValueError, match="stride-2"):
        cfg.with_overrides({"model": "resnet18", "image_size": 4})


def test_jobs_per_precision_reference_first():
    js = jobs(True, "cpu", precisions=["bf16", "fp32"])
    got = [(j["variant"], j["config"]["precision"], j["config"]["allow_tf32"]) for j in js]
    assert got[:2] == [("torch-eager", "fp32", False), ("torch-eager", "bf16", True)]
    assert len(js) == 2 * len(variants())
    with pytest.raises(ValueError, match="unknown precision"):
        jobs(True, precisions=["fp8"])
    # CIFAR-style ResNet: 32x32 unless asked otherwise, quick too (with fewer steps)
    assert jobs(False, "cpu", overrides={"model": "resnet18"})[0]["config"]["image_size"] == 32
    quick = jobs(True, "cpu", overrides={"model": "resnet18"})[0]["config"]
    assert quick["image_size"] == 32 and quick["steps_per_epoch"] < PRESETS["quick"].steps_per_epoch
    assert jobs(True, "cpu", overrides={"model": "resnet18", "steps_per_epoch": 2}
                )[0]["config"]["steps_per_epoch"] == 2  # fmt: skip
    big = jobs(False, "cpu", overrides={"model": "resnet18", "image_size": 64})
    assert big[0]["config"]["image_size"] == 64


def test_time_to_accuracy_and_precision_flag():
    from sciml_bench.cnn.train_loop import compare_precision, time_to_accuracy

    got = time_to_accuracy([4, 8, 12], [1.0, 2.0, 3.0], [0.5, 0.91, 0.95], 0.9)
    assert got == {"target_reached": True, "time_to_accuracy_s": 2.0, "steps_to_accuracy": 8}
    assert time_to_accuracy([4], [1.0], [0.5], 0.9)["target_reached"] is False
    assert time_to_accuracy([4], [1.0], [0.5], None)["target_reached"] is None
    base = {"status": "ok", "backend": "jax", "model": "small", "pipeline": "host",
            "dataset": "synthetic", "device": "cpu", "image_size": 16, "epochs": 2,
            "reason": ""}  # fmt: skip
    fp32 = {**base, "precision": "fp32", "accuracy": 0.95}
    ok = compare_precision({**base, "precision": "bf16", "accuracy": 0.94}, [fp32])
    assert ok["accuracy_drop_vs_fp32"] == pytest.approx(0.01) and not ok["precision_flagged"]
    bad = compare_precision({**base, "precision": "bf16", "accuracy": 0.90}, [fp32])
    assert bad["precision_flagged"] and "0.050 below the fp32 row" in bad["reason"]
    other = compare_precision(
        {**base, "precision": "bf16", "accuracy": 0.5}, [{**fp32, "backend": "x"}]
    )
    assert "precision_flagged" not in other  # no reference row of the same variant
    assert other["reason"] == "accuracy not checked against fp32 (run --precision fp32,bf16 " \
        "to check it)"


def test_precision_note_for_cpu_bf16_and_tf32():
    from sciml_bench.cnn.train_loop import cpu_has_bf16_matrix_units, precision_note

    note = precision_note("bf16", "cpu")
    amx = cpu_has_bf16_matrix_units()
    assert (note == "") == (amx is True)
    assert precision_note("bf16", "cuda") == "" and precision_note("fp32", "cpu") == ""
    # the default precision: a CPU row says it was plain fp32 arithmetic
    assert "tf32 on a CPU computes as fp32" in precision_note("tf32", "cpu")
    assert precision_note("tf32", "cuda") == ""


def test_epoch_order_is_shared_and_reshuffles():
    from sciml_bench.cnn.data import EpochOrder, epoch_order

    cfg = PRESETS["quick"]
    a, b = epoch_order(cfg, 1), epoch_order(cfg, 2)
    assert sorted(a) == list(range(cfg.images_per_epoch)) and not np.array_equal(a, b)
    sampler = EpochOrder(cfg)
    sampler.epoch = 1
    assert list(sampler) == a.tolist() and len(sampler) == cfg.images_per_epoch


# ---------------------------------------------------------------- ResNet-18 in three frameworks


def _frameworks_installed() -> list[str]:
    return [n for n in ("torch-eager", "jax", "tensorflow") if variants()[n].available]


@pytest.mark.slow
def test_resnet18_is_the_same_model_everywhere():
    """Equal parameter counts (11,173,962 for CIFAR ResNet-18 at 3 channels, 10 classes),
    and, at reduced widths, the same logits from the shared initial weights."""
    names = _frameworks_installed()
    if len(names) < 2:
        pytest.skip("fewer than two of torch, jax, tensorflow installed")
    full = PRESETS["cpu"].with_overrides({"model": "resnet18", "image_size": 32})
    small = PRESETS["quick"].with_overrides(
        {"model": "resnet18", "resnet_widths": [4, 8, 8, 16], "image_size": 16}
    )
    x = np.random.default_rng(0).standard_normal((4, 16, 16, 1)).astype(np.float32)
    counts, logits = {}, {}
    if "torch-eager" in names:
        import torch

        from sciml_bench.cnn.torch import build_model

        counts["torch"] = sum(p.numel() for p in build_model(full).parameters())
        m = build_model(small).eval()
        with torch.no_grad():
            logits["torch"] = m(torch.from_numpy(x.transpose(0, 3, 1, 2).copy())).numpy()
    if "jax" in names:
        import equinox as eqx
        import jax

        from sciml_bench.cnn.jax import load_model_and_state

        model, _ = load_model_and_state(full)
        counts["jax"] = sum(a.size for a in jax.tree.leaves(eqx.filter(model, eqx.is_array)))
        model, state = load_model_and_state(small)
        logits["jax"] = np.asarray(model(x.transpose(0, 3, 1, 2), state, False)[0])
    if "tensorflow" in names:
        from sciml_bench.cnn.tensorflow import build_model as keras_model

        counts["keras"] = sum(int(np.prod(v.shape)) for v in keras_model(full).trainable_variables)
        logits["keras"] = np.asarray(keras_model(small)(x, training=False))
    assert set(counts.values()) == {11_173_962}, counts
    ref = next(iter(logits.values()))
    for name, got in logits.items():
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4, err_msg=name)


@pytest.mark.slow
def test_host_pipeline_bf16_curve_and_inference():
    """One real run per framework exercising the second wave's options together: the host
    loaders with one shuffling seed, bf16, evaluation every 4 steps, a target, inference."""
    over = {"pipeline": "host", "eval_every": 4, "target_accuracy": 0.5}
    recs = {}
    for job in jobs(True, "cpu", overrides=over, precisions=["bf16"]):
        if job["variant"] in _frameworks_installed():
            recs[job["variant"]] = run_in_fresh_process(job)
    if not recs:
        pytest.skip("none of torch, jax, tensorflow installed")
    for name, rec in recs.items():
        assert rec["status"] == "ok", (name, rec["reason"])
        assert (rec["pipeline"], rec["precision"]) == ("host", "bf16")
        assert "bfloat16" in rec["precision_policy"].lower()
        assert rec["param_count"] == 9802  # the quick small CNN
        assert 0 < rec["data_wait_s"] < rec["train_s"] + rec["warmup_epoch_s"]
        assert rec["curve_steps"] == [4, 8, 12, 16, 20, 24]
        assert rec["curve_train_s"] == sorted(rec["curve_train_s"])
        assert rec["curve_train_s"][-1] <= rec["warmup_epoch_s"] + rec["train_s"] + 1e-6
        assert rec["curve_accuracy"][-1] == rec["accuracy"] and rec["eval_s"] > 0
        assert rec["target_reached"] is True
        i = rec["curve_steps"].index(rec["steps_to_accuracy"])
        assert rec["curve_accuracy"][i] >= 0.5 > max(rec["curve_accuracy"][:i], default=0)
        assert rec["time_to_accuracy_s"] == rec["curve_train_s"][i]
        assert 0 < rec["latency_p50_ms"] <= rec["latency_p99_ms"]
        assert rec["inference_ips"] > 0 and rec["inference_batch"] == 64
        assert rec["accuracy"] > rec["chance_accuracy"] + 0.3
        json.dumps(rec)
    # the same shuffled order and weights: the same first evaluation, up to bf16 rounding
    first = [r["curve_accuracy"][0] for r in recs.values()]
    assert max(first) - min(first) < 0.1, first


def test_the_curve_ends_at_the_trained_weights():
    """Evaluations every 10 of the quick run's 24 steps: the curve still ends at step 24
    with the final accuracy, so a target that only the trained weights reach counts (it
    once said 'not reached' beside a final accuracy above the target)."""
    if "torch-eager" not in _frameworks_installed():
        pytest.skip("torch not installed")
    over = {"eval_every": 10, "target_accuracy": 0.999}
    (job,) = [j for j in jobs(True, "cpu", overrides=over) if j["variant"] == "torch-eager"]
    rec = run_in_fresh_process(job)
    assert rec["status"] == "ok", rec["reason"]
    assert rec["curve_steps"] == [10, 20, 24]
    assert rec["curve_accuracy"][-1] == rec["accuracy"]
    assert rec["target_reached"] is (max(rec["curve_accuracy"]) >= 0.999)


def test_host_data_wait_counts_starting_the_epoch():
    """Starting a host loader's pass is waiting for data (torch makes its DataLoader
    iterator there): a real quick torch trainer whose start_epoch takes 50 ms longer
    must show at least that much data wait per measured epoch."""
    if "torch-eager" not in _frameworks_installed():
        pytest.skip("torch not installed")
    import time

    from sciml_bench.cnn.torch import build_eager, load
    from sciml_bench.cnn.train_loop import _train

    cfg = PRESETS["quick"].with_overrides({"pipeline": "host", "loader_workers": 0})
    load("cpu")
    trainer = build_eager(cfg, synthetic(cfg), "cpu")
    start = trainer.start_epoch

    def slow_start(epoch: int) -> None:
        start(epoch)
        time.sleep(0.05)

    trainer.start_epoch = slow_start  # type: ignore[method-assign]
    with ResourceSampler() as sampler:
        out = _train(trainer, cfg, sampler, None)
    assert out["data_wait_s"] >= cfg.epochs * 0.05
    assert out["data_wait_s"] <= out["train_s"]


@pytest.mark.slow
def test_tf_host_pipeline_is_one_iterator_in_the_shared_order(monkeypatch):
    """TensorFlow's host pipeline is one tf.data iterator across warm-up and measured
    epochs, in the shared order of every pass. A new pipeline and iterator per pass tore
    the warm-up's iterator down inside the first measured epoch: 0.4-1.2 s of data wait
    (tf.data autotuning) against about 0.01 s for the others. A run whose first pass
    stops after the first step (no warm-up) restarts the iterator at the next pass."""
    if "tensorflow" not in _frameworks_installed():
        pytest.skip("tensorflow not installed")
    import tensorflow as tf

    from sciml_bench.cnn.data import epoch_order
    from sciml_bench.cnn.tensorflow import build, load
    from sciml_bench.cnn.train_loop import _train, passes

    iterators = []
    make_iterator = tf.data.Dataset.__iter__

    def counted(ds):  # type: ignore[no-untyped-def]
        iterators.append(ds)
        return make_iterator(ds)

    monkeypatch.setattr(tf.data.Dataset, "__iter__", counted)
    load("cpu")
    for warmup, expected_iterators in ((1, 1), (0, 2)):
        cfg = PRESETS["quick"].with_overrides({"pipeline": "host", "warmup_epochs": warmup})
        data = synthetic(cfg)
        trainer = build(cfg, data, "cpu")
        seen: list[np.ndarray] = []

        def watched(x, y, step=trainer._step, seen=seen):  # type: ignore[no-untyped-def]
            seen.append(x.numpy())
            return step(x, y)

        trainer._step = watched  # type: ignore[attr-defined]
        iterators.clear()
        with ResourceSampler() as sampler:
            _train(trainer, cfg, sampler, None)
        order = [epoch_order(cfg, e) for e in passes(cfg)]
        if not warmup:
            order[0] = order[0][: cfg.batch_size]  # pass 0 is the first step only
        np.testing.assert_array_equal(np.concatenate(seen), data.x_train[np.concatenate(order)])
        assert len(iterators) == expected_iterators, warmup


@pytest.mark.slow
def test_cli_runs_the_second_wave_options(tmp_path):
    """The real CLI passes --pipeline, --precision, --model, --target-accuracy and
    --eval-every through to the rows, and the results file keeps the curve (about 10 s)."""
    if "torch-eager" not in _frameworks_installed():
        pytest.skip("torch not installed")
    from sciml_bench.results.store import read

    args = ["run", "cnn", "--quick", "--device", "cpu", "-b", "torch-eager", "--model", "small",
            "--pipeline", "host", "--precision", "fp32,bf16", "--target-accuracy", "0.5",
            "--eval-every", "2", "--threads", "1", "--json", "--out", str(tmp_path)]  # fmt: skip
    r = subprocess.run([sys.executable, "-m", "sciml_bench.cli.main", *args],
                       capture_output=True, text=True, timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    printed = [x for x in json.loads(r.stdout) if x.get("kind") != "verdict"]
    (path,) = tmp_path.glob("*.h5")
    stored = read(path).records
    assert [x["precision"] for x in printed] == [x["precision"] for x in stored] == ["fp32", "bf16"]
    steps = list(range(2, 25, 2))  # every 2 of the quick run's 24 steps
    for rec in printed:  # as the worker built them
        assert rec["curve_steps"] == steps and all(type(s) is int for s in rec["curve_steps"])
    for rec in stored:  # as the file gives them back
        assert rec["status"] == "ok", rec["reason"]
        assert (rec["backend"], rec["model"], rec["pipeline"]) == ("torch-eager", "small", "host")
        assert rec["config"]["eval_every"] == 2 and rec["config"]["precision"] == rec["precision"]
        assert 0 < rec["data_wait_s"] < rec["train_s"]
        assert rec["curve_steps"] == steps and all(type(s) is int for s in rec["curve_steps"])
        assert len(rec["curve_train_s"]) == len(rec["curve_accuracy"]) == len(steps)
        assert rec["curve_accuracy"][-1] == rec["accuracy"]
        assert rec["target_accuracy"] == 0.5 and rec["target_reached"] is True
        i = steps.index(rec["steps_to_accuracy"])
        assert rec["curve_accuracy"][i] >= 0.5 and rec["time_to_accuracy_s"] == rec["curve_train_s"][i]
    assert "bfloat16" in stored[1]["precision_policy"].lower()
