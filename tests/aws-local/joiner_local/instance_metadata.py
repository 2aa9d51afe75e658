"""The account's instance-metadata defaults, and the tag keys EC2 refuses when tags are in IMDS.

EC2 keeps per-account, per-Region defaults for new instances' metadata options
(ModifyInstanceMetadataDefaults, GetInstanceMetadataDefaults; moto 5.2.5 has neither). A
launch takes each option from its own request, else its launch template, else the account's
default (the EC2 user guide, "Order of precedence for instance metadata options"). So a
launch template that leaves `InstanceMetadataTags` unset inherits whatever the account chose.

When an instance may read its tags from the instance metadata (`InstanceMetadataTags:
enabled`), its tag keys must be ones IMDS can serve: letters, digits and `+ - = . , _ : @`
only, no space or `/`, and not `.`, `..` or `_index`. The user guide ("View tags for your EC2
instances using instance metadata") says a launch that breaks this fails. It does not name
the error code: `InvalidParameterValue` here is the emulator's choice, and the whole call is
refused (for an instant fleet, EC2 might instead report it per override in `Errors[]`).
"""

from __future__ import annotations

import re
from typing import Any

from joiner_local.capacity_reservations import _template_data

# What IMDS can serve as a tag key (the user guide's restriction list).
_IMDS_KEY = re.compile(r"^[A-Za-z0-9+\-=.,_:@]+$")
_IMDS_RESERVED = {".", "..", "_index"}

_OPTIONS = ("HttpTokens", "HttpPutResponseHopLimit", "HttpEndpoint", "InstanceMetadataTags")


def _defaults(backend: Any) -> dict[str, Any]:
    store = getattr(backend, "_joiner_imds_defaults", None)
    if store is None:
        store = {}
        backend._joiner_imds_defaults = store
    return store


def imds_key_ok(key: str) -> bool:
    return bool(_IMDS_KEY.match(key)) and key not in _IMDS_RESERVED


def _instance_tag_keys(tag_specs: Any) -> list[str]:
    keys: list[str] = []
    for spec in tag_specs or []:
        if (spec.get("ResourceType") or "instance") != "instance":
            continue
        keys += [t.get("Key") or "" for t in spec.get("Tags") or spec.get("Tag") or []]
    return keys


def _check(backend: Any, operation: str, own: Any, template: dict[str, Any], tag_specs: Any) -> None:
    """Refuses a launch whose instance would serve its tags from IMDS with a key IMDS cannot."""
    setting = (own or {}).get("InstanceMetadataTags") or (template.get("MetadataOptions") or {}).get("InstanceMetadataTags") or _defaults(backend).get("InstanceMetadataTags") or "disabled"
    if setting != "enabled":
        return
    keys = _instance_tag_keys(tag_specs) + _instance_tag_keys(template.get("TagSpecifications"))
    bad = sorted({k for k in keys if not imds_key_ok(k)})
    if bad:
        from moto.ec2.exceptions import EC2ClientError

        raise EC2ClientError(
            "InvalidParameterValue",
            f"{operation}: instance tags are allowed in the instance metadata (InstanceMetadataTags=enabled), "
            f"and these tag keys cannot be served there (no space or '/'): {', '.join(bad)}",
        )


def install() -> None:
    from moto.core.responses import ActionResult
    from moto.ec2.responses import EC2Response

    def modify_instance_metadata_defaults(self: Any) -> Any:
        self.error_on_dryrun()
        store = _defaults(self.ec2_backend)
        for name in _OPTIONS:
            value = self._get_param(name)
            if value is None:
                continue
            if value in ("no-preference", -1, "-1"):
                store.pop(name, None)
            else:
                store[name] = value
        return ActionResult({"Return": True})

    def get_instance_metadata_defaults(self: Any) -> Any:
        self.error_on_dryrun()
        return ActionResult({"AccountLevel": dict(_defaults(self.ec2_backend))})

    EC2Response.modify_instance_metadata_defaults = modify_instance_metadata_defaults  # type: ignore[attr-defined]
    EC2Response.get_instance_metadata_defaults = get_instance_metadata_defaults  # type: ignore[attr-defined]

    original_create_fleet = EC2Response.create_fleet

    def create_fleet(self: Any) -> Any:
        tag_specs = self._get_param("TagSpecifications", [])
        for cfg in self._get_param("LaunchTemplateConfigs", []) or []:
            data = _template_data(self.ec2_backend, cfg.get("LaunchTemplateSpecification") or {})
            _check(self.ec2_backend, "CreateFleet", None, data, tag_specs)
        return original_create_fleet(self)

    EC2Response.create_fleet = create_fleet  # type: ignore[method-assign]

    original_run_instances = EC2Response.run_instances

    def run_instances(self: Any) -> Any:
        spec = self._get_param("LaunchTemplate", {}) or {}
        data = _template_data(self.ec2_backend, spec) if spec else {}
        _check(self.ec2_backend, "RunInstances", self._get_param("MetadataOptions", {}), data, self._get_param("TagSpecifications", []))
        return original_run_instances(self)

    EC2Response.run_instances = run_instances  # type: ignore[method-assign]
