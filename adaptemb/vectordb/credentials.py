"""Credentials for a vector-database server: where the key comes from (argument, named variable, default
variable), held as a ``SecretStr`` and masked wherever it could be shown; checks of a server location (no
credentials in the URL, a CA bundle only for https) and the warning for a key sent unencrypted."""

from __future__ import annotations

import base64
import ipaddress
import os
import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from pydantic import SecretStr

from adaptemb.vectordb.common import (
    DEFAULT_KEY_ENV,
    KEY_WORD,
    NAMES,
    InsecureTransportWarning,
    is_server,
    with_article,
)

_MASK = "**********"


@dataclass(frozen=True, repr=False)
class Credential:
    """A credential and where it came from; its repr and str are masked."""

    secret: SecretStr
    source: str
    """Where it came from, for messages: ``$QDRANT_API_KEY``, ``the api_key given``, ..."""
    word: str
    """``API key`` (Qdrant) or ``token`` (Milvus)."""

    def __repr__(self) -> str:
        return f"<{self.word} from {self.source}: {_MASK}>"

    __str__ = __repr__

    def describe(self) -> str:
        return f"{self.word} from {self.source}"

    def fragments(self) -> list[str]:
        """Forms of the secret a message could show: itself, base64 (gRPC's authorization header) and, for
        ``user:password``, the password."""
        value = self.secret.get_secret_value()
        found = {value, base64.b64encode(value.encode()).decode()}
        if ":" in value and len(value.split(":", 1)[1]) >= 4:
            found.add(value.split(":", 1)[1])
        return sorted(found, key=len, reverse=True)

    def scrub(self, text: str) -> str:
        for fragment in self.fragments():
            text = text.replace(fragment, _MASK)
        return text

    def shown_in(self, text: str) -> bool:
        return any(fragment in text for fragment in self.fragments())


def _env_name_shown(name: str) -> str | None:
    """``$NAME`` when ``name`` looks like a conventional variable name (upper case), else None: a value
    passed by mistake where a name belongs (the key itself) is never repeated."""
    return f"${name}" if re.fullmatch(r"[A-Z_][A-Z0-9_]{0,63}", name) else None


def resolve_credential(to: str, location: str | None, api_key: SecretStr | str | None,
                       api_key_env: str | None) -> Credential | None:
    """The credential for a server ``location`` (None when none is configured). An explicit ``api_key`` or
    ``api_key_env`` for a location that is not a server is refused; the default variable is then ignored."""
    word = KEY_WORD[to]
    if api_key is not None and api_key_env is not None:
        raise ValueError(f"give the {word} either as api_key or through api_key_env, not both")
    server = location is not None and is_server(to, location)
    if not server and (api_key is not None or api_key_env is not None):
        where = "a client given" if location is None else repr(location)
        raise ValueError(f"{with_article(word)} is only sent to a server URL; {where} is not one (a client given brings its "
                         f"own credentials, a local database has none): drop --api-key-env / api_key / api_key_env")
    if not server:
        return None
    if api_key is not None:
        if hasattr(api_key, "get_secret_value"):
            value = str(api_key.get_secret_value())
        elif isinstance(api_key, str):
            value = api_key
        else:
            raise TypeError(f"api_key must be a pydantic SecretStr or a str; got {type(api_key).__name__}")
        if not value.strip():
            raise ValueError(f"the {word} given as api_key is empty")
        return Credential(SecretStr(value.strip()), "the api_key given", word)
    name = api_key_env if api_key_env is not None else DEFAULT_KEY_ENV[to]
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise ValueError("--api-key-env / api_key_env takes the NAME of an environment variable that holds the "
                         f"{word}, not the {word} itself; the value given is not a variable name (not shown)")
    value = os.environ.get(name, "").strip()
    shown = _env_name_shown(name)
    if not value:
        if api_key_env is None:
            return None  # no credential configured: fine for a server without authentication
        which = (f"{shown} (named by --api-key-env / api_key_env)" if shown else
                 "named by --api-key-env / api_key_env (its name is not shown: it is not an upper-case variable name; "
                 f"pass the name of a variable that holds the {word}, not the {word} itself)")
        raise ValueError(f"the environment variable {which} is not set or is empty: it should hold the "
                         f"{NAMES[to]} {word}")
    return Credential(SecretStr(value), shown or "the variable named by --api-key-env / api_key_env", word)


def check_location(to: str, location: str, ca_cert: str | os.PathLike[str] | None) -> None:
    """Refuse credentials written into a server URL, and a CA bundle that is missing or for a location
    without TLS."""
    parts = urlsplit(location)
    if is_server(to, location) and "@" in parts.netloc:
        shown = parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]).geturl()
        raise ValueError(f"the location {shown!r} carries credentials before '@' (not shown): a location is shown "
                         f"in output and logs; put the {KEY_WORD[to]} in ${DEFAULT_KEY_ENV[to]} (or the variable "
                         "--api-key-env / api_key_env names) and give the URL without it")
    if ca_cert is not None:
        if parts.scheme != "https":
            raise ValueError(f"ca_cert / --ca-cert verifies an https:// server; {location!r} is not one")
        if not Path(ca_cert).is_file():
            raise FileNotFoundError(2, "CA bundle (--ca-cert / ca_cert) not found", os.fspath(ca_cert))


def warn_insecure(to: str, location: str, credential: Credential | None) -> None:
    """Warn when a credential is about to travel unencrypted to a host that is not this machine."""
    parts = urlsplit(location)
    if credential is None or parts.scheme not in ("http", "tcp"):
        return
    host = (parts.hostname or "").lower()
    try:
        local = ipaddress.ip_address(host).is_loopback
    except ValueError:
        local = host == "localhost" or host.endswith(".localhost")
    if not local:
        warnings.warn(f"the {NAMES[to]} {credential.describe()} is sent unencrypted to {host} ({parts.scheme}://): "
                      "anyone on the network path can read it; use an https:// location",
                      InsecureTransportWarning, stacklevel=4)

