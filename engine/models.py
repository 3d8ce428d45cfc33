"""Which model serves each role, and how to reach it: the model a user brings.

A run names its models per run and per role. Each setting comes from, first to last:

1. a role's own setting given to the run (``--role coder:model=...``, the studio's per-role lines);
2. the run's setting (``--model``, ``--api-base``, ...; the studio's run form);
3. the environment for this role (``TRELLIS_API_BASE_CODER``);
4. the agent's own choice in the workflow file (``"model"``, ``"model_options"``);
5. the environment for every role (``TRELLIS_API_BASE``);
6. the default: the offline scientist, litellm's own endpoint for the model.

That is the order the model name has always had (``--model`` beats ``TRELLIS_MODEL_<ROLE>`` beats
the agent's model beats ``TRELLIS_MODEL``). An API key is never written to a workflow, a
trace or a page: settings name the *environment variable* that holds it (``api_key_env``), and
``describe`` shows only the endpoint.
"""
from __future__ import annotations

import difflib
import math
import os
import re
from dataclasses import dataclass, field, fields, replace
from typing import Mapping
from urllib.parse import unquote, urlsplit, urlunsplit

from .errors import TrellisError
from .harness import MODEL_ROLES
from .limits import MAX_NAME_CHARS, model_problem

OFFLINE_MODEL = "trellis/offline-scientist"

# How long one answer may be when nobody says: room for a whole program in one answer (the
# offline analyzer's script alone is ~3k tokens). A context size given for the endpoint caps it.
DEFAULT_ANSWER_TOKENS = 4096
# The least room an answer may be left after the prompt: below this, the call is refused with
# the numbers instead of being sent to be cut off after a few words.
MIN_ANSWER_TOKENS = 64
DEFAULT_TIMEOUT_S = 120.0
# auto: JSON-schema answers where litellm knows the model takes them; json_schema: OpenAI's
# response_format (vLLM, hosted providers); json_object: a schema inside {"type": "json_object"}
# (llama.cpp's server, which refuses json_schema); off: the tolerant parser alone.
STRUCTURED_MODES = ("auto", "json_schema", "json_object", "off")

_KEY_ENV_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")


class ModelSettingsError(TrellisError, ValueError):
    """A model setting that cannot be used; the message names the setting and the fix."""


@dataclass(frozen=True)
class ModelOptions:
    """Settings for one scope (a run, or one role of it); None means "not said here"."""

    model: str | None = None
    api_base: str | None = None
    api_key_env: str | None = None       # the variable holding the key, never the key
    max_answer_tokens: int | None = None
    context_tokens: int | None = None
    timeout_s: float | None = None
    price_in: float | None = None        # USD per million prompt tokens, for a model litellm has no price for
    price_out: float | None = None       # USD per million answer tokens
    structured: str | None = None        # STRUCTURED_MODES: how a JSON answer is asked for

    def __post_init__(self) -> None:
        problems = self.problems()
        if problems:
            raise ModelSettingsError("; ".join(problems))

    def problems(self) -> list[str]:
        out = []
        if self.model is not None and (p := model_problem("model", self.model)):
            out.append(p)
        if self.api_base is not None:
            parts = urlsplit(self.api_base)
            if parts.scheme not in ("http", "https") or not parts.netloc:
                out.append(f"api_base {self.api_base[:80]!r} is not an http(s) URL, e.g. http://127.0.0.1:8080/v1")
        if self.api_key_env is not None and not _KEY_ENV_RE.match(self.api_key_env):
            out.append(f"api_key_env {self.api_key_env[:40]!r} is not an environment variable name "
                       "(name the variable that holds the key, e.g. OPENAI_API_KEY; never the key itself)")
        for name, low, high in (("max_answer_tokens", 16, 1_000_000), ("context_tokens", 256, 10_000_000)):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high):
                out.append(f"{name} must be a whole number between {low:,} and {high:,}, not {value!r}")
        for name, low, high in (("timeout_s", 1.0, 86_400.0), ("price_in", 0.0, 10_000.0), ("price_out", 0.0, 10_000.0)):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                      or not math.isfinite(value) or not low <= value <= high):
                out.append(f"{name} must be a number between {low:g} and {high:g}, not {value!r}")
        if self.structured is not None and self.structured not in STRUCTURED_MODES:
            out.append(f"structured must be one of {', '.join(STRUCTURED_MODES)}, not {self.structured!r}")
        return out

    def over(self, under: "ModelOptions") -> "ModelOptions":
        """These settings, with what they leave unsaid taken from ``under``."""
        return ModelOptions(**{f.name: getattr(self, f.name) if getattr(self, f.name) is not None
                               else getattr(under, f.name) for f in fields(self)})

    def to_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}

    @classmethod
    def from_dict(cls, data: Mapping[str, object], where: str = "model options") -> "ModelOptions":
        if not isinstance(data, Mapping):
            raise ModelSettingsError(f"{where} must be an object of settings, not {type(data).__name__}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(str(k) for k in data if k not in known)
        if unknown:
            hint = " (write api_key_env: the name of the variable holding the key)" if "api_key" in unknown else ""
            raise ModelSettingsError(f"{where}: unknown setting(s) {', '.join(unknown)}{hint}; "
                                     f"known: {', '.join(sorted(known))}")
        try:
            return cls(**{k: _coerce(k, v) for k, v in data.items()})
        except ModelSettingsError as exc:
            raise ModelSettingsError(f"{where}: {exc}") from None


_INTS = {"max_answer_tokens", "context_tokens"}
_FLOATS = {"timeout_s", "price_in", "price_out"}


def _coerce(name: str, value: object) -> object:
    """A setting's value from text (a CLI flag, an environment variable, a form line) or JSON."""
    if value is None or not isinstance(value, str):
        return value
    text = value.strip()
    try:
        if name in _INTS:
            return int(text.replace("_", "").replace(",", ""))
        if name in _FLOATS:
            return float(text)
    except ValueError:
        raise ModelSettingsError(f"{name} must be a number, not {text[:40]!r}") from None
    return text or None


# The environment's name for each setting; TRELLIS_<NAME>_<ROLE> for one role.
ENVIRONMENT = {
    "model": "TRELLIS_MODEL", "api_base": "TRELLIS_API_BASE", "api_key_env": "TRELLIS_API_KEY_ENV",
    "max_answer_tokens": "TRELLIS_MAX_ANSWER_TOKENS", "context_tokens": "TRELLIS_CONTEXT_TOKENS",
    "timeout_s": "TRELLIS_MODEL_TIMEOUT_S", "price_in": "TRELLIS_PRICE_IN", "price_out": "TRELLIS_PRICE_OUT",
    "structured": "TRELLIS_STRUCTURED_OUTPUT",
}


def from_environment(env: Mapping[str, str], role: str | None = None) -> ModelOptions:
    """What the environment says, for every role (role None) or for one."""
    suffix = f"_{role.upper()}" if role else ""
    values = {name: env.get(var + suffix) for name, var in ENVIRONMENT.items()}
    return ModelOptions.from_dict({k: v for k, v in values.items() if v not in (None, "")},
                                  where=f"the environment ({'TRELLIS_*_' + role.upper() if role else 'TRELLIS_*'})")


@dataclass(frozen=True)
class Endpoint:
    """Everything one model call needs to reach its model, resolved for one role."""

    model: str
    api_base: str | None = None
    api_key_env: str | None = None
    max_answer_tokens: int = DEFAULT_ANSWER_TOKENS
    context_tokens: int | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S
    price_in: float | None = None
    price_out: float | None = None
    structured: str = "auto"

    @property
    def offline(self) -> bool:
        return self.model.startswith("trellis/")

    def api_key(self, env: Mapping[str, str] = os.environ) -> str | None:
        """The key from the variable named for it. A local server needs none, but the OpenAI
        client refuses to send a request without one: a placeholder is sent there."""
        if self.api_key_env:
            key = env.get(self.api_key_env)
            if not key:
                raise ModelSettingsError(f"api_key_env names {self.api_key_env}, which is not set in the environment")
            return key
        return "not-needed" if self.api_base and not self.offline else None

    def answer_room(self, prompt_tokens: int, cap: int | None = None) -> int:
        """The answer length to ask for: the configured cap (or ``cap``, a re-ask's raised one),
        within what the context leaves."""
        room = cap or self.max_answer_tokens
        if self.context_tokens is not None:
            room = min(room, self.context_tokens - prompt_tokens - 16)  # chat templates add a few tokens
        return room

    def wanted_room(self) -> int:
        """The answer room worth cutting the prompt for: the configured cap, or a quarter of the
        context when that is less (a prompt is not cut to nothing to make room for a long answer)."""
        if self.context_tokens is None:
            return self.max_answer_tokens
        return min(self.max_answer_tokens, max(MIN_ANSWER_TOKENS, self.context_tokens // 4))

    def litellm_arguments(self) -> dict:
        args: dict = {"timeout": self.timeout_s}
        if self.api_base:
            args["api_base"] = self.api_base
        key = self.api_key()
        if key:
            args["api_key"] = key
        return args

    def secrets(self, env: Mapping[str, str] = os.environ) -> tuple[str, ...]:
        """What must never be shown or stored: the key's value, and any credentials in the URL."""
        out = []
        if self.api_key_env and len(env.get(self.api_key_env) or "") >= 4:
            out.append(env[self.api_key_env])
        if self.api_base and "@" in urlsplit(self.api_base).netloc:
            userinfo = urlsplit(self.api_base).netloc.rsplit("@", 1)[0]
            out += [part for part in (userinfo, *userinfo.split(":", 1)) if len(part) >= 4]
        return tuple(sorted(set(out), key=len, reverse=True))

    def redact(self, text: str, env: Mapping[str, str] = os.environ) -> str:
        """``text`` with this endpoint's secrets replaced by ``***`` (a provider's error that echoes
        the key, a URL with a password in it)."""
        for secret in self.secrets(env):
            text = text.replace(secret, "***")
        return text

    def describe(self) -> dict:
        """The endpoint as a trace, a console or a page may show it: no key, only where it is read from."""
        shown_base = redact_url(self.api_base) if self.api_base else None
        out: dict = {"model": self.model, "endpoint": shown_base or ("offline" if self.offline else "provider default"),
                     "max_answer_tokens": self.max_answer_tokens, "timeout_s": self.timeout_s}
        if self.context_tokens is not None:
            out["context_tokens"] = self.context_tokens
        if self.api_key_env:
            out["api_key_env"] = self.api_key_env
        if self.price_in is not None or self.price_out is not None:
            out["price_per_mtok"] = [self.price_in or 0.0, self.price_out or 0.0]
        return out

    def line(self) -> str:
        d = self.describe()
        extra = [f"answers ≤ {self.max_answer_tokens:,} tokens"]
        if self.context_tokens is not None:
            extra.append(f"context {self.context_tokens:,}")
        extra.append(f"timeout {self.timeout_s:g} s")
        if self.api_key_env:
            extra.append(f"key from ${self.api_key_env}")
        return f"{self.model} at {d['endpoint']} ({', '.join(extra)})"


def _url_parts(url: str) -> tuple[str, str, int | None, str]:
    """scheme, host, port and path of a URL, normalised for comparison (the default port made
    explicit, no trailing slash)."""
    parts = urlsplit(url.strip())
    scheme = parts.scheme.lower()
    try:
        port = parts.port or {"http": 80, "https": 443}.get(scheme)
    except ValueError:
        port = -1
    return scheme, (parts.hostname or "").lower(), port, parts.path.rstrip("/")


def redact_url(url: str) -> str:
    """The URL with any user name and password in it replaced by ``***`` (a URL shown or stored)."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    host = parts.netloc.rsplit("@", 1)[1]
    return urlunsplit((parts.scheme, f"***@{host}", parts.path, parts.query, parts.fragment))


@dataclass(frozen=True)
class EndpointPolicy:
    """Which endpoints and key variables a run may name, decided by the operator.

    A browser user must never choose where a worker sends a request nor which of its
    environment variables goes with it: the studio builds one of these from its settings and
    the project's operator-only lists, and every endpoint a run resolves is held against it (the
    run's settings, each role's, and an agent's own in a workflow someone edited). What the
    worker's own environment says (``TRELLIS_API_BASE``, ``TRELLIS_API_KEY_ENV``) is the
    operator's choice already and always allowed. The command line, run by the operator, has no
    policy. A refusal names what is allowed, never whether a variable is set.
    """

    api_bases: tuple[str, ...] = ()
    key_envs: tuple[str, ...] = ()

    def allows_base(self, url: str) -> bool:
        scheme, host, port, path = _url_parts(url)
        parts = urlsplit(url.strip())
        if "@" in parts.netloc:
            return False  # credentials belong in a key variable, not in a URL a page shows
        if parts.query or parts.fragment or "\\" in url or any(
                segment in (".", "..") for segment in unquote(parts.path).split("/")):
            return False  # /v1/../admin reaches another path of an allowed host than the one allowed
        for allowed in self.api_bases:
            a_scheme, a_host, a_port, a_path = _url_parts(allowed)
            if (scheme, host, port) == (a_scheme, a_host, a_port) and (path == a_path or path.startswith(a_path + "/")):
                return True
        return False

    def problems(self, options: "ModelOptions", where: str = "") -> list[str]:
        """What in ``options`` this policy refuses, each with what is allowed instead."""
        at = f"{where}: " if where else ""
        out = []
        if options.api_base is not None and not self.allows_base(options.api_base):
            allowed = ", ".join(self.api_bases) or "none (the provider's own endpoint only)"
            out.append(f"{at}API base {redact_url(options.api_base)[:120]!r} is not an endpoint this project may use; "
                       f"allowed: {allowed}. The operator adds endpoints (TRELLIS_MODEL_ENDPOINTS, or the "
                       "project's own list in the admin).")
        if options.api_key_env is not None and options.api_key_env not in self.key_envs:
            allowed = ", ".join(self.key_envs) or "none"
            out.append(f"{at}key variable {options.api_key_env[:40]!r} is not one this project may use; "
                       f"allowed: {allowed}. The operator adds key variables (TRELLIS_MODEL_KEY_VARIABLES, or the "
                       "project's own list in the admin).")
        return out

    def check(self, settings: "ModelSettings") -> None:
        """Raise ModelSettingsError when the run's or a role's settings name what is not allowed."""
        problems = self.problems(settings.run)
        for role, options in sorted(settings.roles.items()):
            problems += self.problems(options, f"role {role}")
        if problems:
            raise ModelSettingsError("; ".join(problems))


@dataclass(frozen=True)
class ModelSettings:
    """The run's model settings: its own, and each role's."""

    run: ModelOptions = field(default_factory=ModelOptions)
    roles: Mapping[str, ModelOptions] = field(default_factory=dict)
    # The operator's bounds (EndpointPolicy); None: the command line, where the operator is the user.
    policy: EndpointPolicy | None = field(default=None, compare=False)

    @classmethod
    def of(cls, model: str | None = None, **options: object) -> "ModelSettings":
        return cls(ModelOptions(model=model, **options))  # type: ignore[arg-type]

    def endpoint(self, role: str, agent_model: str | None = None, agent_options: ModelOptions | None = None,
                 env: Mapping[str, str] = os.environ) -> Endpoint:
        """The endpoint that serves ``role`` (see the module's docstring for the order)."""
        own = self.roles.get(role, ModelOptions())
        role_env, run_env = from_environment(env, role), from_environment(env)
        agent = replace(agent_options or ModelOptions(), model=agent_model)
        model = (own.model or self.run.model or role_env.model or agent.model or run_env.model or OFFLINE_MODEL)
        merged = own.over(self.run).over(role_env).over(agent).over(run_env)
        if self.policy is not None:
            self._check_policy(role, merged, role_env, run_env)
        return Endpoint(
            model=model, api_base=merged.api_base, api_key_env=merged.api_key_env,
            max_answer_tokens=merged.max_answer_tokens or (
                min(DEFAULT_ANSWER_TOKENS, merged.context_tokens // 2) if merged.context_tokens else DEFAULT_ANSWER_TOKENS),
            context_tokens=merged.context_tokens, timeout_s=merged.timeout_s or DEFAULT_TIMEOUT_S,
            price_in=merged.price_in, price_out=merged.price_out, structured=merged.structured or "auto")

    def _check_policy(self, role: str, merged: ModelOptions, *environment: ModelOptions) -> None:
        """The resolved endpoint against the operator's policy; the worker's environment is the
        operator's own choice and passes."""
        assert self.policy is not None
        trusted = EndpointPolicy(
            api_bases=self.policy.api_bases + tuple(e.api_base for e in environment if e.api_base),
            key_envs=self.policy.key_envs + tuple(e.api_key_env for e in environment if e.api_key_env))
        problems = trusted.problems(ModelOptions(api_base=merged.api_base, api_key_env=merged.api_key_env),
                                    f"role {role}")
        if problems:
            raise ModelSettingsError("; ".join(problems))

    def bounded(self, policy: EndpointPolicy) -> "ModelSettings":
        """These settings held to ``policy`` from now on (every endpoint resolved is checked)."""
        policy.check(self)
        return replace(self, policy=policy)

    def to_dict(self) -> dict:
        return {"run": self.run.to_dict(), "roles": {r: o.to_dict() for r, o in sorted(self.roles.items())}}

    @classmethod
    def from_dict(cls, data: Mapping[str, object] | None) -> "ModelSettings":
        data = data or {}
        roles = data.get("roles") or {}
        if not isinstance(roles, Mapping):
            raise ModelSettingsError("model settings: roles must map a role to its settings")
        return cls(ModelOptions.from_dict(data.get("run") or {}, "model settings"),
                   {str(r): ModelOptions.from_dict(o, f"role {r!r}") for r, o in roles.items()})

    @property
    def model(self) -> str | None:
        return self.run.model


def settings(models: "ModelSettings | None", model_override: str | None = None) -> "ModelSettings":
    """The settings a run uses: those given, else just a run-wide model name (--model)."""
    if models is None:
        return ModelSettings.of(model_override)
    if model_override and not models.run.model:
        return replace(models, run=replace(models.run, model=model_override))
    return models


def parse_role_setting(text: str) -> tuple[str, ModelOptions]:
    """``ROLE:key=value[,key=value]`` (the CLI's ``--role`` and the studio's per-role lines), e.g.
    ``coder:model=ollama/qwen2.5-coder:7b,api_base=http://127.0.0.1:11434``."""
    role, sep, rest = text.partition(":")
    role = role.strip()
    if not sep or not role or not rest.strip():
        raise ModelSettingsError(f"{text[:80]!r}: write ROLE:key=value[,key=value], "
                                 "e.g. coder:model=ollama/qwen2.5-coder:7b,max_answer_tokens=2048")
    if len(role) > MAX_NAME_CHARS or not re.match(r"^[a-z_][a-z0-9_]*$", role):
        raise ModelSettingsError(f"{role[:40]!r} is not a role name (lower-case letters, digits and _)")
    if role not in MODEL_ROLES:
        near = difflib.get_close_matches(role, MODEL_ROLES, n=1)
        raise ModelSettingsError(f"no role is called {role!r}{f' (did you mean {near[0]}?)' if near else ''}; "
                                 f"the roles that ask a model: {', '.join(MODEL_ROLES)}")
    values: dict[str, str] = {}
    # split on commas that start a new key=, so a model name may hold ':' and a URL may hold ','
    for part in re.split(r",(?=\s*[a-z_]+\s*=)", rest):
        key, eq, value = part.partition("=")
        if not eq:
            raise ModelSettingsError(f"role {role}: {part.strip()[:60]!r} is not key=value")
        values[key.strip()] = value.strip()
    return role, ModelOptions.from_dict(values, f"role {role!r}")


def describe_endpoints(settings: ModelSettings, roles: Mapping[str, tuple[str | None, ModelOptions | None]],
                       env: Mapping[str, str] = os.environ) -> dict[str, dict]:
    """role -> the endpoint serving it, as shown (no secrets); ``roles`` maps each role to the
    model and options of the agent that plays it."""
    return {role: settings.endpoint(role, model, options, env).describe() for role, (model, options) in roles.items()}
