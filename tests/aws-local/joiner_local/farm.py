"""A server farm: one process pays moto's start-up once, and forks a local AWS world per test.

Starting the local world costs about 2 s of CPU to import moto and the extensions, and 2 s
more the first time IAM is touched (the AWS managed policies are loaded). The test suite
starts a few hundred worlds, so that was minutes of CPU on a 2-core machine. Here the
imports, the extensions and the default account's IAM and EC2 backends (managed policies,
default VPC, AMIs) are built once; each world is a `fork()` of that state, so it starts in
milliseconds with what a fresh server builds on first use (one difference: the default
VPC's and subnets' IDs are the same in every world of a farm). A world then serves EC2's
static catalogue answers from a cache its farm's worlds share (see `_CATALOGUE`), and with
`JOINER_LOCAL_STATS_DIR` set writes its calls and CPU seconds by operation (`_Stats`).

Protocol, one line each way, on stdin and stdout:

    start PORT IAM_MODE   ->   PID        (IAM_MODE: `enforce` or `open`)
    kill PID              ->   ok

The farm exits when its stdin closes (the test process ended, however it ended); every
world it forked dies with it (PR_SET_PDEATHSIG), so nothing outlives the tests.

Run as `python -m joiner_local.farm` with this folder on PYTHONPATH
(`joiner_test_support::MotoServer` does that).
"""

import ctypes
import hashlib
import importlib
import io
import json
import os
import random
import re
import shutil
import signal
import tempfile
import sys
import threading
import time
import uuid

from joiner_local import EXTENSIONS, iam_enforce

# The services the provider, the agent, kube-sim and the tests call: imported before the
# fork so that no world pays for it.
_SERVICES = ["ec2", "eks", "events", "iam", "kms", "sqs", "ssm", "sts"]
_REGION = "us-east-1"
_PR_SET_PDEATHSIG = 1
# When set, each world writes its per-operation call counts and CPU seconds there (_Stats).
STATS_ENV = "JOINER_LOCAL_STATS_DIR"


def _prepare() -> None:
    for name in EXTENSIONS:
        importlib.import_module(f"joiner_local.{name}").install()
    from moto import backends
    from moto.core.models import DEFAULT_ACCOUNT_ID

    for service in _SERVICES:
        backends.get_backend(service)
    _cache_catalogue_answers()
    # Building these is most of a world's start-up: IAM loads the managed policies (the
    # server is started with MOTO_IAM_LOAD_MANAGED_POLICIES=true), EC2 its default VPC,
    # subnets and images. A world is always in the default account and region first.
    # Every partition's IAM, not only `aws`: moto finds the account of a request's access
    # key by looking in each partition (iam.models.get_account_id_from), which builds the
    # five others, managed policies and all, on a world's first signed request: about 4 s
    # of CPU per world when it was left to them.
    from moto.utilities.utils import PARTITION_NAMES

    for partition in PARTITION_NAMES:
        backends.get_backend("iam")[DEFAULT_ACCOUNT_ID][partition]
    backends.get_backend("ec2")[DEFAULT_ACCOUNT_ID][_REGION]
    import moto.server  # noqa: F401  (its werkzeug app and handlers)


# EC2's catalogue calls answer from data moto never changes (the instance types, where they
# are offered, the Spot price history), yet each answer is serialized afresh from about 1,400
# instance types: 1 to 2 s of CPU a call, and every agent makes them at start. A world
# answers them from a cache its farm's worlds share, keyed by region, account and
# parameters, after IAM has authorized the call (moto authorizes before the handler runs).
_CATALOGUE = [
    "describe_instance_types",
    "describe_instance_type_offerings",
    "describe_spot_price_history",
]
CACHE_ENV = "JOINER_LOCAL_CACHE_DIR"
# Parameters an answer does not depend on, left out of the cache key. The emulated Spot
# history holds one price point per market (spot_prices.TIMESTAMP) and the handler reads no
# time window, while the agent asks from "now": keyed on it, every call missed the cache
# and paid the full serialization (about 40 % of a world's emulator CPU).
_UNREAD = {"describe_spot_price_history": {"StartTime", "EndTime"}}
_REQUEST_ID = re.compile(r"<requestId>[^<]*</requestId>|<RequestId>[^<]*</RequestId>")


def _cache_catalogue_answers() -> None:
    # On EC2Response itself, after the extensions: this wraps whatever answers the call.
    from moto.ec2.responses import EC2Response

    for name in _CATALOGUE:
        setattr(EC2Response, name, _cached(getattr(EC2Response, name)))


def _cached(handler):
    def answer(self):
        directory = os.environ.get(CACHE_ENV)
        if not directory:
            return handler(self)
        unread = _UNREAD.get(handler.__name__, set())
        params = sorted(
            (k, v) for k, v in self.querystring.items() if not k.startswith("X-Amz-") and k not in unread
        )
        key = json.dumps([handler.__name__, self.region, self.current_account, params])
        path = os.path.join(directory, hashlib.sha256(key.encode()).hexdigest())
        try:
            with open(path) as f:
                body = f.read()
        except FileNotFoundError:
            status, _, body = self.serialized(handler(self))
            if status != 200:
                return body, {"status": status}
            partial = f"{path}.{os.getpid()}"
            with open(partial, "w") as f:
                f.write(body)
            os.replace(partial, path)
        # A fresh request ID, as every real answer has.
        return _REQUEST_ID.sub(lambda m: re.sub(">[^<]*<", f">{uuid.uuid4()}<", m.group(0)), body)

    answer.__name__ = handler.__name__
    return answer


def _world(port: int, iam_mode: str) -> None:
    """The child: dies with the farm, drops the farm's pipes, and serves until killed."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() == 1:  # the farm ended between fork() and prctl()
        os._exit(0)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    # Each world draws its own IDs, as separate servers would.
    random.seed()
    from moto.moto_api._internal import mock_random

    mock_random.seed(int.from_bytes(os.urandom(8), "big"))
    if iam_mode == "enforce":
        os.environ[iam_enforce.ENV] = "enforce"
    else:
        os.environ.pop(iam_enforce.ENV, None)
    # What moto.server.main does, with the app in our hands (see _Stats).
    from moto.moto_server.werkzeug_app import (
        DomainDispatcherApplication,
        MotoRequestHandler,
        create_backend_app,
    )
    from werkzeug.serving import run_simple

    os.environ["MOTO_PORT"] = str(port)
    app = DomainDispatcherApplication(create_backend_app)
    app.debug = True
    stats_dir = os.environ.get(STATS_ENV)
    try:
        run_simple(
            "127.0.0.1",
            port,
            _Stats(app, stats_dir) if stats_dir else app,
            threaded=True,
            request_handler=MotoRequestHandler,
        )
    finally:
        os._exit(0)


class _Stats:
    """Counts the calls a world answers and the CPU each costs, by operation, into
    `$JOINER_LOCAL_STATS_DIR/<pid>.json`: what the suite's time goes to on the server side."""

    def __init__(self, app, directory: str) -> None:
        self.app = app
        self.path = os.path.join(directory, f"{os.getpid()}.json")
        self.calls: dict[str, list[float]] = {}
        self.lock = threading.Lock()

    def __call__(self, environ, start_response):
        began = time.thread_time()
        key = _operation(environ)
        try:
            return list(self.app(environ, start_response))
        finally:
            spent = time.thread_time() - began
            with self.lock:
                entry = self.calls.setdefault(key, [0, 0.0])
                entry[0] += 1
                entry[1] += spent
                with open(self.path, "w") as f:
                    json.dump(self.calls, f)


def _operation(environ) -> str:
    target = environ.get("HTTP_X_AMZ_TARGET")
    if target:
        return target
    path = environ.get("PATH_INFO", "")
    if environ.get("REQUEST_METHOD") == "POST" and path == "/":
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(length)
        environ["wsgi.input"] = io.BytesIO(body)
        for pair in body.split(b"&"):
            if pair.startswith(b"Action="):
                return pair[7:].decode()
    host = environ.get("HTTP_HOST", "")
    return f"{environ.get('REQUEST_METHOD')} {path.split('/')[1] if '/' in path else path} {host}"


def main() -> None:
    cache = tempfile.mkdtemp(prefix="joiner-local-cache-")
    os.environ[CACHE_ENV] = cache
    try:
        serve()
    finally:
        shutil.rmtree(cache, ignore_errors=True)


def serve() -> None:
    _prepare()
    # Worlds are reaped by the kernel: the farm never waits for one.
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    out = sys.stdout
    out.write("ready\n")
    out.flush()
    for line in sys.stdin:
        words = line.split()
        if len(words) == 3 and words[0] == "start":
            pid = os.fork()
            if pid == 0:
                _world(int(words[1]), words[2])
            out.write(f"{pid}\n")
        elif len(words) == 2 and words[0] == "kill":
            try:
                os.kill(int(words[1]), signal.SIGKILL)
            except ProcessLookupError:
                pass
            out.write("ok\n")
        else:
            out.write(f"error: unknown request {line.strip()!r}\n")
        out.flush()


if __name__ == "__main__":
    main()
