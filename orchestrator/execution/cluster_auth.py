"""Joining a Ray cluster that has token authentication: a refused driver is told the fix.

Ray 2.60 (README "Security"): a head started with ``RAY_AUTH_MODE=token`` refuses every
client that does not send its token. A driver, or a worker's ``ray start``, joining it by
address sends one only when its own environment has ``RAY_AUTH_MODE=token``; the token is
``RAY_AUTH_TOKEN``, else the file ``RAY_AUTH_TOKEN_PATH`` names, else ``~/.ray/auth_token``.
A refused ``ray.init`` retries for 20 s (a C++ warning a second) and raises a bare
``ConnectionError``. ``check_cluster_auth`` asks the cluster once, in a child process (Ray's
warnings, and the abort its C++ token loader can end in, stay there), before the sweep
folder exists, and turns a refusal into one ``UsageError`` line (exit 2) naming the fix.
Anything else (unreachable, another Ray, a ``ray://`` address) is left to ``ray.init``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping

from orchestrator.errors import UsageError

__all__ = ["check_cluster_auth", "refusal", "PROBE_TIMEOUT_S"]

#: the most the child may take (imports on a busy machine, a 5 s connect, the GCS's reply)
PROBE_TIMEOUT_S = 90.0

#: one line on stdout: ``ok``, ``refused\t<Ray's reason>``, ``notoken\t<Ray's reason>`` or
#: ``other\t<what>`` (then ``ray.init`` reports it as it does)
_PROBE = r"""
import socket, sys

def say(kind, text=""):
    print(kind + "\t" + " ".join(str(text).split()), flush=True)
    sys.exit(0)

try:
    from ray._private.authentication.authentication_token_setup import (
        ensure_token_if_auth_enabled, maybe_enable_token_auth_if_token_available)
    from ray._private.services import canonicalize_bootstrap_address_or_die
    from ray._raylet import GcsClient
    from ray.exceptions import AuthenticationError
except Exception as err:
    say("other", repr(err))
address = sys.argv[1]
try:
    if address == "auto":  # as ray.init: only an address found here turns token mode on
        maybe_enable_token_auth_if_token_available(warn_if_disabled=False)
    ensure_token_if_auth_enabled(None, create_token_if_missing=False)
except AuthenticationError as err:
    say("notoken", err.message)
except Exception as err:
    say("other", repr(err))
try:
    gcs = canonicalize_bootstrap_address_or_die(address)
    host, _, port = gcs.rpartition(":")
    socket.create_connection((host.strip("[]"), int(port)), timeout=5).close()
except BaseException as err:
    say("other", repr(err))
try:
    GcsClient(address=gcs)
except AuthenticationError as err:
    say("refused", err.message)
except Exception as err:
    say("other", repr(err))
say("ok")
"""

_FIX = ("set RAY_AUTH_MODE=token and RAY_AUTH_TOKEN_PATH=<a copy of the head's "
        "~/.ray/auth_token> (or RAY_AUTH_TOKEN=<the token>) in the driver's environment, "
        "as for `ray start` on the workers (README \"Security\")")


def refusal(address: str, kind: str, reason: str,
            env: Mapping[str, str] | None = None) -> UsageError:
    """The one line for a driver the cluster at ``address`` refused (``kind`` ``refused``)
    or that has no token to send (``notoken``); ``env`` is the driver's environment."""
    env = os.environ if env is None else env
    mode = env.get("RAY_AUTH_MODE")
    head = f"cannot join the Ray cluster at {address}"
    if kind == "notoken":
        return UsageError(f"{head}: this driver has no token to send ({reason}); {_FIX}")
    if (mode or "").strip().lower() != "token":
        said = "RAY_AUTH_MODE is not set" if mode is None else f"RAY_AUTH_MODE={mode}"
        return UsageError(f"{head}: it requires Ray's token authentication and this driver "
                          f"sent no token ({said}); {_FIX}")
    if env.get("RAY_AUTH_TOKEN"):
        source = "RAY_AUTH_TOKEN"
    elif env.get("RAY_AUTH_TOKEN_PATH"):
        source = f"RAY_AUTH_TOKEN_PATH={env['RAY_AUTH_TOKEN_PATH']}"
    else:
        source = "~/.ray/auth_token"
    return UsageError(f"{head}: it refused this driver's token (from {source}), which is "
                      f"not the cluster's; {_FIX}")


def check_cluster_auth(address: str, timeout_s: float = PROBE_TIMEOUT_S) -> None:
    """Raise ``UsageError`` if the cluster at ``address`` refuses this driver's token (or it
    has none); return otherwise, also when the cluster cannot be asked (``ray.init`` then
    says why). A process already connected to Ray is not asked again."""
    ray = sys.modules.get("ray")
    if ray is not None and getattr(ray, "is_initialized", lambda: False)():
        return
    env = dict(os.environ)
    env.setdefault("RAY_py_gcs_connect_timeout_s", "10")  # the child's own wait only
    env.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    try:
        out = subprocess.run([sys.executable, "-c", _PROBE, address], env=env,
                             stdin=subprocess.DEVNULL, capture_output=True, text=True,
                             timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired):
        return
    lines = out.stdout.strip().splitlines()
    kind, _, reason = (lines[-1] if lines else "").partition("\t")
    if kind in ("refused", "notoken"):
        raise refusal(address, kind, reason)
