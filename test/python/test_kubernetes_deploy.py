"""deploy/kubernetes/ stays consistent: the manifests parse (with PyYAML
when it is installed, else with a small structural reader of the subset
they use), the StatefulSet, its headless Service and the client Job agree
on names, ports and sizes, and the worker's environment really starts a
dtorch-worker placed as the manifest intends (the pod's address replaced by
loopback)."""
import os
import re
import subprocess
import sys
import tempfile
import time

import pytest

from dtorch import _runtime

from conftest import subprocess_env

DIAL_IN_CLIENT = """
import dtorch
mesh = dtorch.init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
x = dtorch.ones(4, 4, device_mesh=mesh, placements=[dtorch.Shard(0), dtorch.Shard(1)])
assert (x @ x).sum().item() == 64.0
dtorch.shutdown()
print("ok")
"""

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEPLOY = os.path.join(ROOT, "deploy", "kubernetes")
MANIFESTS = ["workers.yaml", "client.yaml"]


def _scalar(text):
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    if text in ("true", "false"):
        return text == "true"
    if text.startswith("[") and text.endswith("]"):
        inner = text[1:-1].strip()
        return [_scalar(part) for part in re.findall(r'"[^"]*"|\'[^\']*\'|[^,\s][^,]*', inner)] if inner else []
    return text


def _strip_comment(line):
    out, quote = [], None
    for i, c in enumerate(line):
        if quote:
            if c == quote:
                quote = None
        elif c in "'\"":
            quote = c
        elif c == "#" and (i == 0 or line[i - 1] in " \t"):
            break
        out.append(c)
    return "".join(out).rstrip()


def _parse_block(lines, start, indent):
    """Parses lines[start:] at `indent` (a mapping or a sequence); returns
    (value, next line). Raises ValueError on anything outside the subset."""
    if lines[start][0] > indent and indent >= 0:
        raise ValueError(f"unexpected indentation: {lines[start][1]!r}")
    indent = lines[start][0]
    is_list = lines[start][1].startswith("- ") or lines[start][1] == "-"
    result = [] if is_list else {}
    i = start
    while i < len(lines) and lines[i][0] == indent:
        text = lines[i][1]
        if is_list:
            if not text.startswith("-"):
                raise ValueError(f"expected a list item: {text!r}")
            rest = text[1:].strip()
            if not rest:
                value, i = _parse_block(lines, i + 1, -1)
                result.append(value)
                continue
            # "- key: value" opens a mapping whose other keys are indented
            # under the key.
            sub = [(indent + 2, rest)]
            j = i + 1
            while j < len(lines) and lines[j][0] > indent:
                sub.append(lines[j])
                j += 1
            if ":" in rest and not rest.startswith(("'", '"', "[")):
                value, _ = _parse_block(sub, 0, -1)
            else:
                value = _scalar(rest)
            result.append(value)
            i = j
            continue
        key, sep, rest = text.partition(":")
        if not sep:
            raise ValueError(f"expected 'key: value': {text!r}")
        key = _scalar(key)
        if key in result:
            raise ValueError(f"duplicate key {key!r}")
        if rest.strip():
            result[key] = _scalar(rest)
            i += 1
        elif i + 1 < len(lines) and lines[i + 1][0] > indent:
            result[key], i = _parse_block(lines, i + 1, -1)
        elif i + 1 < len(lines) and lines[i + 1][0] == indent and lines[i + 1][1].startswith("-"):
            result[key], i = _parse_block(lines, i + 1, -1)
        else:
            result[key] = None
            i += 1
    if i < len(lines) and lines[i][0] > indent:
        raise ValueError(f"unexpected indentation: {lines[i][1]!r}")
    return result, i


def structural_load_all(text):
    """The documents of a manifest, read by the structural reader."""
    docs, current = [], []
    for raw in text.splitlines() + ["---"]:
        if "\t" in raw[: len(raw) - len(raw.lstrip())]:
            raise ValueError("tab in indentation")
        if raw.strip() == "---":
            if current:
                value, end = _parse_block(current, 0, -1)
                if end != len(current):
                    raise ValueError(f"trailing lines: {current[end][1]!r}")
                docs.append(value)
            current = []
            continue
        line = _strip_comment(raw)
        if line.strip():
            current.append((len(line) - len(line.lstrip()), line.strip()))
    return docs


def load_all(path):
    with open(path) as f:
        text = f.read()
    try:
        import yaml
    except ImportError:
        return structural_load_all(text)
    docs = [d for d in yaml.safe_load_all(text) if d is not None]
    # The structural reader agrees with PyYAML on these files (so that it is
    # a real check where PyYAML is missing).
    assert structural_load_all(text) == docs, path
    return docs


@pytest.fixture(scope="module")
def manifests():
    docs = []
    for name in MANIFESTS:
        docs += load_all(os.path.join(DEPLOY, name))
    by_kind = {}
    for d in docs:
        assert {"apiVersion", "kind", "metadata"} <= set(d), d
        assert d["metadata"].get("name"), d
        by_kind.setdefault(d["kind"], []).append(d)
    return by_kind


def env_of(container):
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


def test_workers_statefulset_service_and_client_agree(manifests):
    (service,) = manifests["Service"]
    (sts,) = manifests["StatefulSet"]
    (job,) = manifests["Job"]
    assert service["spec"]["clusterIP"] == "None", "the Service must be headless"
    assert sts["spec"]["serviceName"] == service["metadata"]["name"]
    labels = sts["spec"]["template"]["metadata"]["labels"]
    assert sts["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert service["spec"]["selector"].items() <= labels.items()
    (worker,) = sts["spec"]["template"]["spec"]["containers"]
    env = env_of(worker)
    replicas = sts["spec"]["replicas"]
    assert int(env["WORLD_SIZE"]) == replicas
    assert env["RANK"]["fieldRef"]["fieldPath"] == "metadata.labels['apps.kubernetes.io/pod-index']"
    assert env["DTORCH_BIND_ADDRESS"]["fieldRef"]["fieldPath"] == "status.podIP"
    port = int(env["DTORCH_WORKER_PORT"])
    assert worker["ports"][0]["containerPort"] == port
    assert service["spec"]["ports"][0]["port"] == port
    # Every variable the worker is given is one it reads.
    known = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
             "DTORCH_RANKS_PER_WORKER", "DTORCH_BIND_ADDRESS", "DTORCH_WORKER_PORT",
             "DTORCH_HOST_ID", "DTORCH_LAUNCHER", "DTORCH_TOKEN", "DTORCH_COLLECTIVE_ADDRESS"}
    assert set(env) <= known, set(env) - known
    # The client dials every pod, in rank order, by its stable name.
    (client,) = job["spec"]["template"]["spec"]["containers"]
    workers = env_of(client)["DTORCH_WORKERS"].split(",")
    name, svc = sts["metadata"]["name"], service["metadata"]["name"]
    assert workers == [f"tcp://{name}-{i}.{svc}:{port}" for i in range(replicas)]
    # Both read the token from the same Secret.
    secrets = {v["secret"]["secretName"] for d in (sts, job)
               for v in d["spec"]["template"]["spec"]["volumes"]}
    assert len(secrets) == 1
    # The network policy admits the client's pods to the controller port.
    (policy,) = manifests["NetworkPolicy"]
    client_labels = job["spec"]["template"]["metadata"]["labels"]
    rule = policy["spec"]["ingress"][0]
    assert rule["from"][0]["podSelector"]["matchLabels"].items() <= client_labels.items()
    assert rule["ports"][0]["port"] == port


def test_the_structural_reader_rejects_broken_yaml():
    with pytest.raises(ValueError):
        structural_load_all("a:\n  b: 1\n   c: 2\n")
    with pytest.raises(ValueError):
        structural_load_all("a: 1\na: 2\n")
    with pytest.raises(ValueError):
        structural_load_all("a:\n\t- b\n")
    assert structural_load_all("a:\n  - name: x\n    value: \"1\"\n  - y\n") == \
        [{"a": [{"name": "x", "value": "1"}, "y"]}]


def test_the_worker_environment_starts_a_placed_worker(manifests, tmp_path):
    exe = _runtime._worker_executable()
    if not exe or not os.path.exists(exe):
        pytest.skip("dtorch-worker is not built")
    (sts,) = manifests["StatefulSet"]
    (worker,) = sts["spec"]["template"]["spec"]["containers"]
    env = {k: v for k, v in env_of(worker).items() if isinstance(v, str)}
    env.update(RANK="1", DTORCH_BIND_ADDRESS="127.0.0.1", DTORCH_WORKER_PORT="0")
    token = tmp_path / "token"
    token.write_text("k8s-test-token\n")
    command = [exe if c == "dtorch-worker" else c for c in worker["command"]]
    command = [str(token) if c == "/etc/dtorch/token" else c for c in command]
    # Port 0 is refused (a port number is needed): the manifest's own port
    # may be taken here, so take a free one.
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        env["DTORCH_WORKER_PORT"] = str(s.getsockname()[1])
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith(("SLURM_", "DTORCH_")) and k not in
             ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    p = subprocess.Popen(command, env=dict(clean, **env), stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    try:
        lines = []
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            line = p.stdout.readline()
            if not line:
                break
            lines.append(line)
            if line.startswith("dtorch-worker listening on"):
                break
        out = "".join(lines)
    finally:
        p.kill()
        p.wait()
    per_worker = int(env["DTORCH_RANKS_PER_WORKER"])
    world = int(env["WORLD_SIZE"]) * per_worker
    assert f"(ranks {per_worker}-{2 * per_worker - 1} of {world})" in out, out
    assert f"listening on tcp://127.0.0.1:{env['DTORCH_WORKER_PORT']}" in out, out
    assert "placed by torchrun" in out and "collectives on 127.0.0.1" in out, out


# ---- the dial-in variant: the workers dial the client's Service ----------

DIAL_IN = os.path.join(DEPLOY, "dial-in")


@pytest.fixture(scope="module")
def dial_in_manifests():
    by_kind = {}
    for name in ("workers.yaml", "client.yaml"):
        for d in load_all(os.path.join(DIAL_IN, name)):
            assert {"apiVersion", "kind", "metadata"} <= set(d), d
            by_kind.setdefault(d["kind"], []).append(d)
    return by_kind


def test_dial_in_workers_point_at_the_client_service(dial_in_manifests):
    (sts,) = dial_in_manifests["StatefulSet"]
    (job,) = dial_in_manifests["Job"]
    services = {s["metadata"]["name"]: s for s in dial_in_manifests["Service"]}
    (worker,) = sts["spec"]["template"]["spec"]["containers"]
    (client,) = job["spec"]["template"]["spec"]["containers"]
    wenv, cenv = env_of(worker), env_of(client)
    # The workers dial MASTER_ADDR:MASTER_PORT, a Service selecting the
    # client's pod, whose port forwards to the port the client listens on.
    assert wenv["DTORCH_DIAL_IN"] == "1"
    controller = services[wenv["MASTER_ADDR"]]
    client_labels = job["spec"]["template"]["metadata"]["labels"]
    assert controller["spec"]["selector"].items() <= client_labels.items()
    port = int(wenv["MASTER_PORT"])
    assert controller["spec"]["ports"][0]["port"] == port
    listen_port = int(cenv["DTORCH_LISTEN"].rsplit(":", 1)[1])
    assert controller["spec"]["ports"][0]["targetPort"] == listen_port
    assert client["ports"][0]["containerPort"] == listen_port
    # The client expects the world the workers make up.
    replicas = sts["spec"]["replicas"]
    assert int(wenv["WORLD_SIZE"]) == replicas
    assert int(cenv["DTORCH_WORLD_SIZE"]) == replicas * int(wenv["DTORCH_RANKS_PER_WORKER"])
    assert sts["spec"]["serviceName"] in services
    assert wenv["RANK"]["fieldRef"]["fieldPath"] == "metadata.labels['apps.kubernetes.io/pod-index']"
    known = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
             "DTORCH_RANKS_PER_WORKER", "DTORCH_BIND_ADDRESS", "DTORCH_DIAL_IN",
             "DTORCH_CONTROLLER_WAIT_MS", "DTORCH_HOST_ID", "DTORCH_LAUNCHER", "DTORCH_TOKEN",
             "DTORCH_COLLECTIVE_ADDRESS"}
    assert set(wenv) <= known, set(wenv) - known
    known_client = {"DTORCH_LISTEN", "DTORCH_WORLD_SIZE", "DTORCH_ADMISSION_TIMEOUT_MS",
                    "DTORCH_TOKEN_FILE", "DTORCH_PEER_TIMEOUT_MS"}
    assert set(cenv) <= known_client, set(cenv) - known_client
    secrets = {v["secret"]["secretName"] for d in (sts, job)
               for v in d["spec"]["template"]["spec"]["volumes"]}
    assert len(secrets) == 1
    # Only the workers reach the client's port.
    policies = {p["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/name"]: p
                for p in dial_in_manifests["NetworkPolicy"]}
    rule = policies[client_labels["app.kubernetes.io/name"]]["spec"]["ingress"][0]
    worker_labels = sts["spec"]["template"]["metadata"]["labels"]
    assert rule["from"][0]["podSelector"]["matchLabels"].items() <= worker_labels.items()
    assert rule["ports"][0]["port"] == listen_port


def test_the_dial_in_environments_start_a_session(dial_in_manifests, tmp_path):
    """Every pod's environment as the manifests give it (the Service name
    and the pod address replaced by loopback, the port by a free one): the
    client's init() admits the workers and computes."""
    exe = _runtime._worker_executable()
    if not exe or not os.path.exists(exe):
        pytest.skip("dtorch-worker is not built")
    import socket
    (sts,) = dial_in_manifests["StatefulSet"]
    (job,) = dial_in_manifests["Job"]
    (worker,) = sts["spec"]["template"]["spec"]["containers"]
    (client,) = job["spec"]["template"]["spec"]["containers"]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    token = tmp_path / "token"
    token.write_text("k8s-dial-in-token\n")
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith(("SLURM_", "DTORCH_")) and k not in
             ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    command = [exe if c == "dtorch-worker" else c for c in worker["command"]]
    command = [str(token) if c == "/etc/dtorch/token" else c for c in command]
    procs = []
    for rank in range(sts["spec"]["replicas"]):
        env = {k: v for k, v in env_of(worker).items() if isinstance(v, str)}
        env.update(RANK=str(rank), MASTER_ADDR="127.0.0.1", MASTER_PORT=port,
                   DTORCH_BIND_ADDRESS="127.0.0.1")
        procs.append(subprocess.Popen(command, env=dict(clean, **env), stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    client_env = {k: v for k, v in env_of(client).items() if isinstance(v, str)}
    client_env.update(DTORCH_LISTEN=f"127.0.0.1:{port}", DTORCH_TOKEN_FILE=str(token),
                      DTORCH_ADMISSION_TIMEOUT_MS="30000")
    # The client runs in an interpreter of its own: it starts a session from
    # the manifest's environment, and the test session of conftest, which
    # other files share, stays untouched.
    client_env = dict(subprocess_env(), **client_env)
    try:
        r = subprocess.run([sys.executable, "-c", DIAL_IN_CLIENT], env=client_env,
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0 and "ok" in r.stdout, r.stdout + r.stderr
    finally:
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
    outs = [p.stdout.read() for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    assert all(f"dialing the controller at tcp://127.0.0.1:{port}" in o for o in outs), outs
