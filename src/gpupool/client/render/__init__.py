"""How the client shows what the API answers: kubectl-like tables and ``describe`` text.

Plain text only, the same on a terminal and in a pipe: columns are left-aligned and
separated by three spaces, headers in capitals, ``-`` for nothing, so ``awk`` and tests can
split the lines on whitespace (only the last column, REASON or MESSAGE, holds spaces).
Times are cluster seconds, shown as kubectl shows ages (``45s``, ``3m20s``, ``5h``, ``2d``).

Per-card usage of a node (the CARDS column) is one character per card::

    .  idle        1-9  tenths of the card in use (rounded up)        #  full
    x  unhealthy

How much of a card is in use is the server's figure (``usedMilli``; on a MIG card, the
instances held, each by the share its card declares), never valued here.
"""

from gpupool.client.render.events import EVENT_HEADERS, event_row, events_section, events_table
from gpupool.client.render.jobs import (
    JOB_HEADERS,
    JOB_WIDE,
    describe_job,
    job_gpus,
    job_row,
    jobs_table,
    local_queue,
)
from gpupool.client.render.nodes import (
    NODE_HEADERS,
    NODE_WIDE,
    alloc_pct,
    card_mark,
    cards,
    describe_node,
    node_row,
    nodes_table,
    used_mib,
    used_milli,
)
from gpupool.client.render.queues import (
    cluster_queue_row,
    cluster_queues_table,
    cohorts_table,
    flavors_table,
    local_queues_table,
)
from gpupool.client.render.text import (
    BLANK,
    NONE,
    REASON_WIDTH,
    age,
    cell,
    key,
    mib,
    milli,
    short,
    table,
)

__all__ = [
    "BLANK",
    "EVENT_HEADERS",
    "JOB_HEADERS",
    "JOB_WIDE",
    "NODE_HEADERS",
    "NODE_WIDE",
    "NONE",
    "REASON_WIDTH",
    "age",
    "alloc_pct",
    "card_mark",
    "cards",
    "cell",
    "cluster_queue_row",
    "cluster_queues_table",
    "cohorts_table",
    "describe_job",
    "describe_node",
    "event_row",
    "events_section",
    "events_table",
    "flavors_table",
    "job_gpus",
    "job_row",
    "jobs_table",
    "key",
    "local_queue",
    "local_queues_table",
    "mib",
    "milli",
    "node_row",
    "nodes_table",
    "short",
    "table",
    "used_mib",
    "used_milli",
]
