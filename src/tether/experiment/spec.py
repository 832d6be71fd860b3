"""An experiment written down: a TOML file of variants (each an agent: model, tools, system,
limits), tasks (a prompt, or a recorded session and a point to replay it from, and a
`MODULE:ATTR` check) and how many runs, read into an `ExperimentSpec` that builds the
variants' agents. What `tether experiment run SPEC` runs; running it is `matrix`'s."""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import pydantic
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from tether import documents
from tether.agent import Agent, resolve_model
from tether.errors import UsageError
from tether.experiment.plan import Task, fork_point, import_check
from tether.limits import Limits
from tether.messages import JSONValue
from tether.providers.base import Model
from tether.runtime.base import check_tenant
from tether.store.base import Store
from tether.tools.base import Tool
from tether.tools.load import load_tools


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class VariantSpec(_Strict):
    """One variant: an agent as `tether run` makes one (`python:MODULE:ATTR` models too)."""

    model: str = Field(min_length=1)
    tools: tuple[str, ...] = ()
    system: str | None = None
    max_steps: int = Field(default=50, gt=0)
    max_tokens: int | None = Field(default=None, gt=0)
    max_seconds: float | None = Field(default=None, gt=0)

    def parts(self) -> tuple[Model, list[Tool], Limits]:
        """The model and tools resolved (`UsageError` for one that does not load)."""
        limits = Limits(
            max_steps=self.max_steps, max_tokens=self.max_tokens, max_seconds=self.max_seconds
        )
        return resolve_model(self.model), load_tools(self.tools, label="tools"), limits

    def agent(
        self, parts: tuple[Model, list[Tool], Limits], store: Store, tenant: str | None = None
    ) -> Agent:
        """The variant's agent on `store`, recording its model and tools as `tether run`
        does, so `tether sessions resume` can rebuild it; its runs are `tenant`'s if named
        (what `tether serve` shows that tenant)."""
        model, tools, limits = parts
        metadata: dict[str, JSONValue] = {
            "cli": {"model": self.model, "tools": list(self.tools), "mcp": None}
        }
        if tenant is not None:
            metadata["tenant"] = tenant
        return Agent(
            model, tools=tools, system=self.system, limits=limits, store=store, metadata=metadata
        )


class TaskSpec(_Strict):
    """A prompt, or a recorded session replayed from a point: `from_session = "ses_..."`,
    `at = {turn = 2}` (or `seq`, `after_turn`), `live` the policy for calls that repeat
    no recorded one (`none`, `reads`, `all`)."""

    prompt: str | None = Field(default=None, min_length=1)
    from_session: str | None = Field(default=None, min_length=1)
    at: dict[str, int] | None = None
    live: Literal["none", "reads", "all"] = "reads"
    name: str | None = None
    check: str | None = None  # MODULE:ATTR
    pass_at: float = 1.0

    @model_validator(mode="after")
    def _prompt_or_session(self) -> TaskSpec:
        if (self.prompt is None) == (self.from_session is None):
            raise PydanticCustomError("task", "a task has a prompt or a from_session, one of them")
        if (self.from_session is None) != (self.at is None):
            raise PydanticCustomError(
                "task", "a from_session task needs its point: at = {turn = N}"
            )
        if self.at is not None:
            try:
                fork_point(dict(self.at))
            except UsageError as exc:
                raise PydanticCustomError("task", "{problem}", {"problem": str(exc)}) from None
        return self

    def task(self) -> Task:
        check = None if self.check is None else import_check(self.check)
        if self.from_session is not None:
            at = fork_point(dict(self.at or {}))
            return Task.from_session(
                self.from_session, at=at, check=check, name=self.name, pass_at=self.pass_at,
                live=self.live,
            )  # fmt: skip
        return Task(self.prompt or "", check, self.name, self.pass_at)


class ExperimentSpec(_Strict):
    """`runs` repeats of every task on every variant; `id` names the experiment (a new one
    when absent: then the command prints it, to continue it with `--id`); `tenant` is the
    tenant whose runs they are, for a store a `tether serve` uses (none: no tenant's)."""

    variants: dict[str, VariantSpec] = Field(min_length=1)
    tasks: tuple[TaskSpec, ...] = Field(min_length=1)
    runs: int = Field(default=10, gt=0)
    concurrency: int = Field(default=4, gt=0)
    seed: int = 0
    max_cost_usd: float | None = Field(default=None, gt=0)
    confidence: float = Field(default=0.95, gt=0, lt=1)
    id: str | None = None
    tenant: str | None = None

    @field_validator("tenant")
    @classmethod
    def _tenant_name(cls, tenant: str | None) -> str | None:
        try:
            return None if tenant is None else check_tenant(tenant)
        except UsageError as exc:  # said as it is, without pydantic's "Value error, "
            raise PydanticCustomError("tenant_name", "{problem}", {"problem": str(exc)}) from None

    def agents(
        self, open_store: Callable[[], Store], tenant: str | None = None
    ) -> dict[str, Agent]:
        """The variants' agents on one store, opened only once every model and tool has
        loaded: a spec that does not load touches no store. Their runs are `tenant`'s, or
        the spec's `tenant`'s when None."""
        parts = {name: (v, v.parts()) for name, v in self.variants.items()}
        store = open_store()
        owner = tenant or self.tenant
        return {name: v.agent(made, store, owner) for name, (v, made) in parts.items()}

    def built_tasks(self) -> list[Task]:
        """The tasks with their checks imported (`UsageError` for one that does not)."""
        return [t.task() for t in self.tasks]


def load_spec(path: str) -> ExperimentSpec:
    """The spec in a TOML file; `UsageError` naming the file and what is wrong with it."""
    try:
        data = documents.read(path, "toml")
    except OSError as exc:
        raise UsageError(f"{path}: cannot read it: {exc}") from exc
    except ValueError as exc:
        raise UsageError(f"{path}: {exc}") from exc
    try:
        return ExperimentSpec.model_validate(data)
    except pydantic.ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "the file"
        raise UsageError(f"{path}: {where}: {first['msg']}") from None
