"""Which models a turn uses: per role, with the org's own provider key when it has one.

An org that stored a key for a model's provider is billed on its own account: the turn
gets instances built with that key (cached per spec and key), not the server's.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass

from providers import Model, provider_of
from store import OrgKeys
from turn._turn import TurnModels


class ModelNotAllowedError(LookupError):
    """A request (its ``field``) or an agent's profile named a model spec this server
    does not offer (``ModelResolver.allowed``)."""

    def __init__(self, spec: str, field: str = "models") -> None:
        super().__init__(spec, field)
        self.spec = spec
        self.field = field


@dataclass(frozen=True, slots=True)
class TurnRoleModels:
    answer: Model | None
    planner: Model | None
    summariser: Model | None
    executor: Model | None = None


class ModelResolver:
    def __init__(self, models: TurnModels, org_keys: OrgKeys, *, cache_size: int = 64) -> None:
        self._models = models
        self._org_keys = org_keys
        self._cache_size = cache_size
        self._byok: OrderedDict[tuple[str, str], Model] = OrderedDict()

    @property
    def allowed(self) -> list[str]:
        return sorted(self._models.selectable)

    async def resolve(
        self,
        *,
        org_id: str,
        requested: str | None,
        planner: str | None = None,
        roles: Mapping[str, str] | None = None,
    ) -> TurnRoleModels:
        """The turn's models. ``roles`` (an agent profile's spec per role) replaces the
        server's for those roles; ``requested`` (a spec the server allows) replaces every
        answering role's (the executor's and the merger's), over the profile's too: the
        request wins, within ``allowed``. ``planner`` replaces the planner's the same way;
        without it the planner keeps its own (cheap) model. A spec the server does not
        offer is ``ModelNotAllowedError`` (naming the field it came in)."""
        models, roles = self._models, dict(roles or {})
        if requested is not None:
            self._offered(requested, field="model")
            roles["executor"] = roles["merger"] = requested
        if planner is not None:
            self._offered(planner, field="planner_model")
            roles["planner"] = planner
        answer: tuple[str | None, Model | None]
        if "merger" in roles:
            answer = (roles["merger"], self._offered(roles["merger"]))
        else:
            answer = (models.specs.get("merger") or models.specs.get("executor"), models.answerer)
        keys: dict[str, str | None] = {}
        resolved = [
            await self._for_org(org_id, spec, model, keys)
            for spec, model in (
                answer,
                self._for_role("planner", models.planner, roles),
                self._for_role("summariser", models.summariser, roles),
                self._for_role("executor", models.executor, roles),
            )
        ]
        return TurnRoleModels(*resolved)

    async def resolve_offered(
        self,
        *,
        org_id: str,
        requested: str | None,
        planner: str | None = None,
        roles: Mapping[str, str] | None = None,
    ) -> TurnRoleModels:
        """``resolve``, falling back on what is still offered: for a turn started earlier
        (a resume, a takeover, a queued run) whose chosen models or agent's specs the server
        has since stopped offering. A choice still offered is kept; one that is not falls
        back on the agent's specs, then on the server's."""
        offered = self._models.selectable
        requested = requested if requested in offered else None
        planner = planner if planner in offered else None
        try:
            return await self.resolve(
                org_id=org_id, requested=requested, planner=planner, roles=roles
            )
        except ModelNotAllowedError:
            return await self.resolve(org_id=org_id, requested=requested, planner=planner)

    def _offered(self, spec: str, *, field: str = "models") -> Model:
        model = self._models.selectable.get(spec)
        if model is None:
            raise ModelNotAllowedError(spec, field)
        return model

    def _for_role(
        self, role: str, model: Model | None, roles: Mapping[str, str]
    ) -> tuple[str | None, Model | None]:
        spec = roles.get(role)
        if spec is None:
            return self._models.specs.get(role), model
        return spec, self._offered(spec)

    async def _for_org(
        self, org_id: str, spec: str | None, model: Model | None, keys: dict[str, str | None]
    ) -> Model | None:
        if spec is None or model is None or self._models.build is None:
            return model
        if not self._org_keys.enabled:
            return model
        provider = provider_of(spec)
        if provider not in keys:
            keys[provider] = await self._org_keys.get(org_id=org_id, provider=provider)
        key = keys[provider]
        return model if key is None else self._with_key(spec, key)

    def _with_key(self, spec: str, api_key: str) -> Model:
        assert self._models.build is not None
        cache_key = (spec, hashlib.sha256(api_key.encode()).hexdigest())
        model = self._byok.get(cache_key)
        if model is None:
            model = self._byok[cache_key] = self._models.build(spec, api_key)
            if len(self._byok) > self._cache_size:
                self._byok.popitem(last=False)
        else:
            self._byok.move_to_end(cache_key)
        return model
