"""The llama.cpp build runs on the CPU it is on, and the app starts on it by default where it does.

- The instruction sets are those the CPU has *and* the OS enables, never AMX, and a user's own CMake choice stands.
- The installed binding is the wheel built from those flags, and it answers a token here, in its runner process: on
  whatever CPU CI gets (REQUIRE_LLAMACPP=1 there).
- With no backend named, the embedded model (or a .gguf) starts on llama.cpp; a model folder on transformers; a build
  that does not answer leaves the app on transformers, saying why on the page and in `make run`'s output.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from app.clients import choice
from app.clients.llamacpp import cpu, probe
from tests.helpers import ROOT

SAPPHIRE_RAPIDS = {"sse4_2", "avx", "f16c", "fma", "avx2", "bmi2", "avx_vnni", "avx512f", "avx512cd", "avx512vl",
                   "avx512dq", "avx512bw", "avx512vbmi", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_int8",
                   "amx_bf16"}
XSAVE_ALL = 0x600E7  # x87, SSE, AVX, opmask, ZMM_Hi256, Hi16_ZMM, XTILECFG, XTILEDATA


def on(options: dict[str, bool]) -> set[str]:
    return {name for name, enabled in options.items() if enabled}


def test_a_cpu_that_advertises_amx_gets_avx512_but_never_amx():
    options = cpu.build_options(SAPPHIRE_RAPIDS, XSAVE_ALL)
    assert options["GGML_NATIVE"] is False
    assert {"GGML_AVX2", "GGML_AVX512", "GGML_AVX512_VNNI", "GGML_AVX512_BF16", "GGML_AVX_VNNI"} <= on(options)
    assert not on(options) & {"GGML_AMX_TILE", "GGML_AMX_INT8", "GGML_AMX_BF16"}


def test_avx512_is_left_out_where_the_os_does_not_enable_its_registers():
    """A hypervisor that hides the ZMM state from XCR0: CPUID's AVX-512 flags count for nothing."""
    options = cpu.build_options(SAPPHIRE_RAPIDS, XSAVE_ALL & ~((1 << 5) | (1 << 6) | (1 << 7)))
    assert "GGML_AVX2" in on(options)
    assert not {name for name in on(options) if name.startswith("GGML_AVX512")}
    without_avx = cpu.build_options(SAPPHIRE_RAPIDS, 0b11)  # x87 and SSE state only
    assert on(without_avx) == {"GGML_SSE42", "GGML_BMI2"}


def test_an_older_cpu_gets_only_what_it_lists(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu sse4_2 avx f16c fma avx2 bmi2\n\nprocessor\t: 1\n")
    options = cpu.build_options(cpu.cpu_flags(cpuinfo), None)
    assert on(options) == {"GGML_SSE42", "GGML_AVX", "GGML_F16C", "GGML_FMA", "GGML_AVX2", "GGML_BMI2"}
    assert cpu.cpu_flags(tmp_path / "missing") == set()


def test_a_users_own_cpu_choice_and_gpu_flags_are_kept(monkeypatch):
    assert cpu.cmake_args("-DGGML_NATIVE=ON") == "-DGGML_NATIVE=ON"
    cuda = cpu.cmake_args("-DGGML_CUDA=on")
    assert cuda.startswith("-DGGML_CUDA=on")
    if sys.platform == "linux" and cpu.os_xsave_features() is not None:
        assert "-DGGML_NATIVE=OFF" in cuda and "-DGGML_AMX_TILE=OFF" in cuda
    assert "AVX-512" in cpu.describe("-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_AVX512=ON")


def test_the_os_is_asked_which_register_states_it_enables():
    features = cpu.os_xsave_features()
    if features is None:
        pytest.skip("not x86-64 Linux with ARCH_GET_XCOMP_SUPP")
    assert features & 0b11 == 0b11  # x87 and SSE state, on every x86-64


# ----- the installed build, on this machine --------------------------------------------------------------------------

def test_the_installed_build_is_the_portable_one_and_answers_a_token_here(gguf_client):
    """The check CI makes on whatever CPU it gets: the wheel built from this machine's flags is the one installed,
    and it answers a token in its runner process (forced: not the kept verdict)."""
    import os

    from app.clients.llamacpp import build

    expected = build.wheel_dir(cpu.cmake_args(os.environ.get("CMAKE_ARGS", "")))
    assert (build._installed_wheel() or "").startswith(str(expected)), (build._installed_wheel(), expected)
    verdict = probe.verdict(force=True)
    assert verdict.ok, verdict.reason
    assert "a token in" in verdict.reason


# ----- the default backend ------------------------------------------------------------------------------------------

@pytest.fixture()
def fresh_choice(monkeypatch):
    monkeypatch.delenv("DEMO_BACKEND", raising=False)
    monkeypatch.setattr(choice, "gpu_present", lambda: False)
    choice.default_choice.cache_clear()
    yield
    choice.default_choice.cache_clear()


def test_the_default_is_llamacpp_for_a_gguf_and_transformers_for_a_folder(fresh_choice, monkeypatch, tmp_path):
    monkeypatch.setattr(probe, "usable", lambda: probe.Verdict(True, "a token in 1.0 s"))
    assert choice.default_backend("") == "llamacpp"
    assert choice.default_backend(str(tmp_path / "model.gguf")) == "llamacpp"
    assert choice.default_backend(str(tmp_path)) == "hf"
    monkeypatch.setenv("DEMO_BACKEND", "vllm")
    assert choice.default_backend("") == "vllm"
    assert choice.fallback_note() is None


def test_a_build_that_does_not_answer_leaves_the_app_on_transformers_saying_why(fresh_choice, monkeypatch):
    monkeypatch.setattr(probe, "usable", lambda: probe.Verdict(False, "its build failed (pip wheel exited with 1)"))
    monkeypatch.delenv("DEMO_MODEL", raising=False)
    assert choice.default_backend("") == "hf"
    assert choice.fallback_note() == ("llama.cpp, the faster engine on a CPU, is not used: its build failed (pip wheel "
                                      "exited with 1).")
    assert "llama.cpp is not used: its build failed" in choice.default_choice("").describe()


def test_with_a_gpu_the_default_stays_transformers(fresh_choice, monkeypatch):
    monkeypatch.setattr(choice, "gpu_present", lambda: True)
    assert choice.default_choice("") == choice.DefaultChoice("hf", "a GPU is present, and transformers on CUDA "
                                                                   "serves it")


def test_make_runs_output_names_the_engine_it_starts_on(gguf_client):
    """What `make run` and `make serve` print first (python -m app.clients.choice), on this machine."""
    env = {key: value for key, value in __import__("os").environ.items() if key not in ("DEMO_BACKEND", "DEMO_MODEL")}
    out = subprocess.run([sys.executable, "-m", "app.clients.choice"], cwd=ROOT, env=env, text=True,
                         capture_output=True, timeout=120)
    assert out.returncode == 0, out.stderr
    if choice.gpu_present():
        assert "Engine: Hugging Face transformers" in out.stdout
    else:
        assert out.stdout.strip() == "Engine: llama.cpp (the fastest on this CPU), in a process of its own."
    named = subprocess.run([sys.executable, "-m", "app.clients.choice"], cwd=ROOT, text=True,
                           env={**env, "DEMO_BACKEND": "hf"}, capture_output=True, timeout=120)
    assert named.stdout.strip() == "Engine: hf (DEMO_BACKEND)."


def test_the_chat_page_says_why_it_runs_on_transformers(fresh_choice, monkeypatch, tmp_path, smollm2_dir):
    """The page's status caption, when the build did not answer: the app is up on transformers and says why."""
    from tests.helpers import open_app

    monkeypatch.setattr(probe, "usable", lambda: probe.Verdict(False, "its build failed (pip wheel exited with 1)"))
    monkeypatch.setenv("DEMO_DATABASE_URL", f"sqlite:///{tmp_path}/conversations.db")
    with open_app(monkeypatch, "", timeout=180) as at:  # the embedded model, no backend named
        captions = " ".join(caption.value for caption in at.caption)
        assert "transformers · SmolLM2-135M-Instruct" in captions, captions  # the page is up, on transformers
        assert "llama.cpp, the faster engine on a CPU, is not used: its build failed" in captions, captions


def test_a_failed_build_never_fails_setup_and_its_reason_is_kept(monkeypatch, tmp_path, capsys):
    """A build that fails (here: a version the index does not have) prints why, returns 0 (make setup goes on), and
    leaves its reason for the app's verdict; nothing is installed over the working binding."""
    from app.clients.llamacpp import build

    record = tmp_path / "llamacpp-build.json"
    monkeypatch.setattr(build, "BUILD_RECORD", record)
    monkeypatch.setattr(probe, "BUILD_RECORD", record)
    monkeypatch.setattr(build, "PACKAGE", "llama-cpp-python==0.0.0")
    monkeypatch.setattr(build, "wheel_dir", lambda args: tmp_path / "wheels")
    monkeypatch.setattr(sys, "prefix", str(tmp_path))  # the build log goes there too
    assert build.main() == 0
    out = capsys.readouterr().out
    assert "llama.cpp could not be built here (pip wheel exited with" in out and "runs on transformers" in out
    assert "pip wheel exited with" in record.read_text()
    monkeypatch.setattr(probe, "_library_key", lambda: None)  # as where nothing was installed
    verdict = probe.verdict()
    assert not verdict.ok and verdict.reason.startswith("its build failed (pip wheel exited with")
