"""The Kafka listener's handlers by API key, bound to the broker (`kafka_handlers`).

Every handler module names its APIs in a HANDLERS map; ApiVersions advertises exactly the
keys found here, so an API is supported once its handler is registered, and never before.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from raftlog.kafka.api import ApiKey
from raftlog.kafka.handlers import (
    alter_configs,
    configs,
    elect_leaders,
    fetch,
    group_admin,
    group_offsets,
    groups,
    metadata,
    offsets_for_leader_epoch,
    produce,
    producer_ids,
    reassignments,
    topics,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from raftlog.broker.context import HandlerContext

HANDLERS: dict[int, Callable[..., Any]] = {
    **metadata.HANDLERS,
    **produce.HANDLERS,
    **fetch.HANDLERS,
    **configs.HANDLERS,
    **alter_configs.HANDLERS,
    **offsets_for_leader_epoch.HANDLERS,
    **producer_ids.HANDLERS,
    **topics.HANDLERS,
    **elect_leaders.HANDLERS,
    **reassignments.HANDLERS,
    **groups.HANDLERS,
    **group_offsets.HANDLERS,
    **group_admin.HANDLERS,
}


def kafka_handlers(ctx: HandlerContext) -> dict[int, Callable[[Any, int, Any], Any]]:
    """API key -> handler(request, version, connection), with `ctx` bound in."""
    handlers = dict(HANDLERS)
    handlers[ApiKey.API_VERSIONS] = metadata.api_versions_handler([*handlers, ApiKey.API_VERSIONS])
    return {int(k): functools.partial(fn, ctx) for k, fn in handlers.items()}
