"""Which model a turn uses: the requested spec or the executor's, with the org's own key.

An org that stored a key for the model's provider is billed on its own account: the turn
gets an instance built with that key (cached per spec and key), not the server's.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict

from providers import Model, provider_of
from store import OrgKeys
from stream._turn import TurnModels


class ModelNotAllowedError(LookupError):
    """A request named a model spec this server does not offer."""


class ModelResolver:
    def __init__(self, models: TurnModels, org_keys: OrgKeys, *, cache_size: int = 64) -> None:
        self._models = models
        self._org_keys = org_keys
        self._cache_size = cache_size
        self._byok: OrderedDict[tuple[str, str], Model] = OrderedDict()

    @property
    def allowed(self) -> list[str]:
        return sorted(self._models.selectable)

    async def resolve(self, *, org_id: str, requested: str | None) -> Model | None:
        if requested is None:
            spec, model = self._models.executor_spec, self._models.executor
        elif requested in self._models.selectable:
            spec, model = requested, self._models.selectable[requested]
        else:
            raise ModelNotAllowedError(requested)
        if spec is None or self._models.build is None or not self._org_keys.enabled:
            return model
        key = await self._org_keys.get(org_id=org_id, provider=provider_of(spec))
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
