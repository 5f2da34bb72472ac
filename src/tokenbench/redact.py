"""Secrets never reach a file, the database, a report or a message: what is stored passes through here first.

Three routes a secret takes into a recorded value, each replaced by ``***``:
- the value of a secret option (``--api-key sk-…``, ``--api-key=sk-…``; abbreviations are refused by the parser);
- ``KEY=value`` where the name looks like a secret (``OPENAI_API_KEY=…``, ``HF_TOKEN=…``), as in ``env`` prefixes
  of a server command given to ``coldstart --cmd``;
- userinfo in a URL (``http://user:pass@host``) and body fields named like secrets (``{"api_key": …}``).

An argument error shows the words the parser refused as the user typed them (``arguments``), the secrets in them
masked: besides the routes above, the value of an unknown option spelled like a secret one (``--api-ke``,
``--apikey``, ``--auth-token``) and a bare word shaped like a key (``sk-…``, ``hf_…``).
"""

from __future__ import annotations

import difflib
import json
import re
import shlex
from typing import Any
from urllib.parse import urlsplit

SECRET_OPTIONS = ("--api-key", "--api_key", "--hf-token", "--token", "--password", "--agent-token")
#: A name that holds a secret: KEY, TOKEN, SECRET, PASSWORD, PASSWD, CREDENTIAL, AUTH, as a word of the name.
SECRET_NAME = re.compile(r"(^|[_\-.])(api[_\-]?key|key|token|secret|password|passwd|credentials?|auth|"
                         r"authorization|bearer)($|[_\-.])", re.IGNORECASE)
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_ASSIGN = re.compile(r"^(-{0,2}[A-Za-z_][A-Za-z0-9_.\-]*)=(.*)$", re.DOTALL)
_URL_USERINFO = re.compile(r"(\b[a-zA-Z][a-zA-Z0-9+.\-]*://)[^/?#\s]*@")  # to the last @ of the authority
_QUERY_SECRET = re.compile(r"([?&][^=&#\s]+)=([^&#\s]*)")

#: Words shaped like a provider's key or token: OpenAI/Anthropic ``sk-``, Hugging Face ``hf_``, GitHub, GitLab,
#: Slack, AWS access key ids, JSON web tokens.
KEY_SHAPED = re.compile(r"(?<![A-Za-z0-9_\-])(sk-|sk_|hf_|ghp_|gho_|ghs_|ghu_|github_pat_|glpat-|xox[abprs]-|AKIA|"
                        r"eyJ)[A-Za-z0-9_\-.]{6,}")

HIDDEN = "***"


def is_secret_name(name: str) -> bool:
    """``api_key``, ``HF_TOKEN``, ``accessToken``, ``clientSecret``: a word of the name says secret."""
    return bool(SECRET_NAME.search(_CAMEL.sub("_", name)))


#: What a key-shaped word starts with (``KEY_SHAPED``): text without any of them is passed over at C speed.
_KEY_PREFIXES = ("sk-", "sk_", "hf_", "ghp_", "gho_", "ghs_", "ghu_", "github_pat_", "glpat-", "xox", "AKIA", "eyJ")


def url(text: str) -> str:
    """``text`` with the userinfo of every URL in it, and secret-named query parameters, replaced."""
    if "://" not in text:
        return text
    if "@" in text:
        text = _URL_USERINFO.sub(lambda m: m.group(1) + HIDDEN + "@", text)
    if "://" in text and "?" in text:
        text = _QUERY_SECRET.sub(lambda m: f"{m.group(1)}={HIDDEN}" if is_secret_name(m.group(1)[1:]) else m.group(0),
                                 text)
    return text


def _json_arg(text: str) -> str | None:
    """A JSON object or list given as an argument, with its secrets hidden; None when it is not JSON."""
    if not text.lstrip().startswith(("{", "[")):
        return None
    try:
        return json.dumps(body(json.loads(text)))
    except (ValueError, RecursionError):
        return None


def has_userinfo(u: str) -> bool:
    try:
        parts = urlsplit(u)
        return bool(parts.username or parts.password)
    except ValueError:
        return "@" in u


def body(obj: Any) -> Any:
    """A request body with the values of secret-named fields replaced, at any depth."""
    if isinstance(obj, dict):
        return {k: HIDDEN if isinstance(k, str) and is_secret_name(k) else body(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [body(v) for v in obj]
    if isinstance(obj, str):
        return url(obj)
    return obj


def stored(obj: Any) -> Any:
    """A recorded request or answer as a file may hold it: the scalar value of every secret-named field replaced
    (an object or list under such a name is walked instead: a tool's JSON schema may name a parameter ``token``),
    words shaped like a key and URL userinfo in any text replaced, and the same inside tool-call ``arguments``
    (JSON as text)."""
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            if isinstance(k, str) and is_secret_name(k) and not isinstance(v, (dict, list)) and v is not None:
                out[k] = HIDDEN
            elif k == "arguments" and isinstance(v, str):
                out[k] = _stored_json(v)
            else:
                out[k] = stored(v)
        return out
    if isinstance(obj, list):
        return [stored(v) for v in obj]
    if isinstance(obj, str):
        return keys(obj)
    return obj


def _stored_json(text: str) -> str:
    """JSON held as text, its secrets hidden; text that is not JSON as any text."""
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return keys(text)
    hidden = stored(value)
    return text if hidden == value else json.dumps(hidden, ensure_ascii=False)


def command(argv: list[str]) -> str:
    """A command line as it may be stored."""
    out: list[str] = []
    hide = False
    for a in argv:
        if hide:
            out.append(HIDDEN)
            hide = False
            continue
        if a in SECRET_OPTIONS or (a.startswith("--") and "=" not in a and is_secret_name(a.lstrip("-"))):
            out.append(a)  # --agent-token T, --hf-token T: the value that follows is the secret
            hide = True
            continue
        js = _json_arg(a)  # a JSON argument, e.g. --extra-body '{"api_key": …}'
        if js is not None:
            out.append(shlex.quote(js))
            continue
        m = _ASSIGN.match(a)
        if m and _json_arg(m.group(2)) is not None:  # --extra-body='{"api_key": …}'
            out.append(shlex.quote(f"{m.group(1)}={_json_arg(m.group(2))}"))
        elif m and (m.group(1) in SECRET_OPTIONS or is_secret_name(m.group(1).lstrip("-"))):
            out.append(f"{m.group(1)}={HIDDEN}")
        elif " " in a.strip() and (any(o in a for o in SECRET_OPTIONS) or "=" in a or "@" in a):
            try:  # a quoted command line, e.g. coldstart --cmd "env OPENAI_API_KEY=… server"
                out.append(shlex.quote(command(shlex.split(a))))
            except ValueError:
                out.append(url(a))
        else:  # quoted as a shell needs it, so the stored line runs again (a --cmd of spaces lost its quotes)
            out.append(shlex.quote(url(a)) if any(c.isspace() for c in a) else url(a))
    return " ".join(out)


def command_line(text: str) -> str:
    """A command line given as one string (a power meter's), as ``command`` stores a split one; one that cannot be
    split (unbalanced quotes) with its key-shaped words and URL userinfo hidden."""
    try:
        return command(shlex.split(text))
    except ValueError:
        return keys(text)


def looks_like_secret_option(word: str, known: frozenset[str] = frozenset()) -> bool:
    """An option word whose value is a secret, or may be: a secret option (``--api-key``), one named like a
    secret (``--auth-token``), or one of them abbreviated or misspelt (``--api-ke``, ``--apikey``, ``--hf-tokn``).
    ``known``: options that hold no secret, e.g. the tool's own (``--tokens``, ``--api``), never taken for one."""
    name = word.split("=", 1)[0]
    if not name.startswith("-") or name in known and name not in SECRET_OPTIONS:
        return False
    bare = name.lstrip("-")
    secrets = [o.lstrip("-") for o in SECRET_OPTIONS]
    return (name in SECRET_OPTIONS or is_secret_name(bare)
            or len(bare) >= 3 and any(o.startswith(bare) for o in secrets)
            or bool(difflib.get_close_matches(bare.replace("_", "-"), secrets, n=1, cutoff=0.8)))


#: A name in free text whose value is a secret (``DB_PASSWORD=...``, ``token: ...``, ``"api_key": "..."``): as
#: ``SECRET_NAME``, but for the words that in code name something else too (``key=lambda``, ``auth: required``).
_TEXT_SECRET_NAME = re.compile(r"(^|[_\-.])(api[_\-]?key|access[_\-]?key|private[_\-]?key|token|secret|password|"
                               r"passwd|pwd|credentials?)($|[_\-.])", re.IGNORECASE)
#: ``name = value`` or ``name: value`` in free text, the name and its value quoted or not; never an option
#: (``--token-file: not allowed``, an error about one).
_TEXT_ASSIGN = re.compile(r"(?<![A-Za-z0-9_\-])([A-Za-z_][A-Za-z0-9_.\-]*)([\"']?[ \t]*[:=][ \t]*)([\"']?)"
                          r"([^\s\"'`,;)}\]]{3,})")
_TEXT_HINTS = ("pass", "secret", "token", "key", "pwd", "credential", "bearer")
#: An HTTP bearer credential in text (a curl command an agent ran, a log it read): ``Bearer <token>``.
_BEARER = re.compile(r"(\b[Bb]earer[ \t]+)([A-Za-z0-9\-._~+/]{8,}=*)")


def _secret_value(m: re.Match[str]) -> bool:
    """Whether an assignment gives a secret-named name a value that could be a secret (not a number, a constant,
    a call, or one hidden already)."""
    name, value = m.group(1), m.group(4)
    plain = value.isdigit() or value in ("null", "None", "true", "false", HIDDEN) or "(" in value
    return not plain and bool(_TEXT_SECRET_NAME.search(_CAMEL.sub("_", name)))


def _assignments(text: str) -> str:
    """``text`` with the values of secret-named names hidden. A name that is not a secret's gives up its value
    to what follows: in ``Config: DB_PASSWORD=hunter2`` or ``note: password: x`` the label's "value" holds one."""
    out, pos = [], 0
    while (m := _TEXT_ASSIGN.search(text, pos)) is not None:
        if _secret_value(m):
            out.append(text[pos:m.start(4)] + HIDDEN)
            pos = m.end(4)
        else:
            out.append(text[pos:m.end(2)])
            pos = m.end(2)
    return "".join(out) + text[pos:]


def keys(text: str) -> str:
    """``text`` with words shaped like a key (``KEY_SHAPED``), the values given to secret-named names
    (``DB_PASSWORD=hunter2``, ``token: abc``) and URL userinfo replaced: for a message, a prompt, a file an agent
    read."""
    text = url(text)
    if any(p in text for p in _KEY_PREFIXES):
        text = KEY_SHAPED.sub(HIDDEN, text)
    low = text.lower()
    if any(h in low for h in _TEXT_HINTS):
        text = _BEARER.sub(lambda m: m.group(1) + HIDDEN, _assignments(text))
    return text


def arguments(words: list[str], known: frozenset[str] = frozenset()) -> str:
    """Arguments the parser refused, as an error may show them: the user's own words, the secrets masked (the
    value of anything that looks like a secret option, secret-named ``KEY=value``, URL userinfo, secret fields of
    JSON, words shaped like keys). ``known``: the parser's options, which hold no secret but ``SECRET_OPTIONS``."""
    out: list[str] = []
    hide = False
    for w in words:
        if hide:  # whatever follows a secret option is its value, even one that starts with "-"
            out.append(HIDDEN)
            hide = False
        elif looks_like_secret_option(w, known):
            out.append(w.split("=", 1)[0] + "=" + HIDDEN if "=" in w else w)
            hide = "=" not in w
        else:
            out.append(keys(command([w])))
    return " ".join(out)
