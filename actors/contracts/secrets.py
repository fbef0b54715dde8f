"""Secrets told by their name or by their value, so a spec never stores one.

A spec, its copy in the sweep folder, the ledger and MLflow are plain files that people
share: a secret may enter them only as a ``${NAME}`` reference, read from the environment
where the engine starts. ``secret_reason`` says why a value must be such a reference:

- its name says so (a word ``TOKEN``, ``KEY``, ``SECRET``, ``PASS``/``PASSWORD``,
  ``CREDENTIALS``, ``AUTH`` between underscores), whatever the value (environment
  variables only: an engine option's name, such as ``tokenizer_mode``, says nothing);
- its value looks like a token, whatever the name: a known issuer's prefix (Hugging Face
  ``hf_``, OpenAI ``sk-``, GitHub ``ghp_``/``github_pat_``, GitLab ``glpat-``, Slack
  ``xox?-``, AWS ``AKIA``, Google ``AIza``, a JWT's ``eyJ``), or a long random string
  (32+ characters of a token alphabet, three character classes or hex, and a high
  entropy per character).

A false alarm costs one edit (the ``${NAME}`` form works for any value); a stored secret
cannot be taken back.
"""

from __future__ import annotations

import math
import re
from collections import Counter

__all__ = ["SECRET_NAME", "ENV_REF", "SECRET_ERROR", "secret_reason", "secret_fix"]

#: the validation error type of a refused secret: its input is never shown
SECRET_ERROR = "secret"

#: ``${NAME}``: a reference to an environment variable, resolved when the engine starts
ENV_REF = re.compile(r"^\$\{([A-Za-z_][A-Za-z0-9_]*)\}$")
#: names whose values are secrets: one of these words between underscores (``HF_TOKEN``,
#: ``OPENAI_API_KEY``, ``DB_PASS``; not ``TOKENIZERS_PARALLELISM``)
SECRET_NAME = re.compile(r"(^|_)(TOKEN|KEY|SECRET|PASS|PASSWORD|PASSWD|CREDENTIALS?|AUTH|"
                         r"APIKEY)(_|$)", re.I)

_PREFIXES = re.compile(r"^(hf_[A-Za-z0-9]{20,}|sk-[A-Za-z0-9_-]{20,}|sk_live_[A-Za-z0-9]{16,}"
                       r"|gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,}"
                       r"|glpat-[A-Za-z0-9_-]{20,}|xox[abposr]-[A-Za-z0-9-]{10,}"
                       r"|AKIA[0-9A-Z]{16}|AIza[0-9A-Za-z_-]{35}"
                       r"|eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]+)")
_TOKEN_ALPHABET = re.compile(r"^[A-Za-z0-9_\-+/=.]{32,}$")
_HEX = re.compile(r"^[0-9a-fA-F]{32,}$")
#: bits per character above which a long token-alphabet string is taken for a random one
#: (English words and paths stay under about 3.5; random base64 is near 6, hex near 4)
_ENTROPY = 3.5


def _entropy(text: str) -> float:
    counts = Counter(text)
    return -sum(n / len(text) * math.log2(n / len(text)) for n in counts.values())


def _random_looking(value: str) -> bool:
    if not _TOKEN_ALPHABET.match(value) or value.startswith(("/", ".")):
        return False  # spaces, or a path
    classes = sum(bool(re.search(p, value)) for p in ("[a-z]", "[A-Z]", "[0-9]"))
    return (classes == 3 or bool(_HEX.match(value))) and _entropy(value) >= _ENTROPY


def secret_reason(name: str, value: object, by_name: bool = True) -> str | None:
    """Why ``name: value`` must be given as a ``${NAME}`` reference; None when it need not
    (a reference already, or neither the name (when ``by_name``) nor the value looks
    secret)."""
    if not isinstance(value, str) or ENV_REF.match(value):
        return None
    if by_name and SECRET_NAME.search(name):
        return f"{name} looks like a secret"
    if _PREFIXES.match(value):
        return f"the value of {name} looks like a token by its prefix ({value[:4]}...)"
    if _random_looking(value):
        return f"the value of {name} looks like a token ({len(value)} random characters)"
    return None


def secret_fix(name: str, reason: str) -> str:
    """The whole error: the reason and the fix (the value itself is never repeated)."""
    var = re.sub(r"[^A-Za-z0-9_]", "_", name).upper()
    return (f"{reason}: give it as a reference to an environment variable, e.g. "
            f"{name}: \"${{{var}}}\" (read on the node when the engine starts, never written "
            "to the spec, the ledger or MLflow)")
