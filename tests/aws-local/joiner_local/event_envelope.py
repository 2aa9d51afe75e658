"""EventBridge delivers an event's whole envelope to its targets, `account` included.

Every event EventBridge delivers carries the same top-level fields: version, id,
detail-type, source, account, time, region, resources and detail (EventBridge user guide,
"Amazon EventBridge events", the event structure reference: `account` is "the 12-digit
number identifying an AWS account"). moto 5.2.5 rebuilds the event for a target from a
default input template that lists every field but `account`, so an SQS target received
events with no account, and a consumer that checks where an event comes from could not be
tested. Here the default template keeps `account`, which moto already reads into its paths
map.
"""

from __future__ import annotations


def install() -> None:
    from moto.events.utils import EventTemplateParser

    template = EventTemplateParser.DEFAULT_EVENT_INPUT_TEMPLATE
    if '"account"' in template:
        return
    EventTemplateParser.DEFAULT_EVENT_INPUT_TEMPLATE = template.replace(
        '"source": "<source>",', '"source": "<source>", "account": "<account>",', 1
    )
    assert '"account"' in EventTemplateParser.DEFAULT_EVENT_INPUT_TEMPLATE
