#!/usr/bin/env python3
"""moto's server with fault injection, for crates/headroom-aws/tests/moto.rs.

Usage: moto_server.py PORT FAULT_FILE

moto has no fault injection for EC2. This wraps EC2's request handling and, on every request,
re-reads FAULT_FILE (JSON; missing or empty means no faults):

    {
      "launch": {"p5.48xlarge": {"code": "InsufficientInstanceCapacity", "status": 500}},
      "spot_min_price": 0.5,
      "throttle": {"code": "RequestLimitExceeded", "status": 503},
      "interrupt": ["i-0123456789abcdef0"],
      "reservations": {"cr-0123456789abcdef0": 2},
      "autoscaling": {"SetDesiredCapacity": {"code": "ScalingActivityInProgress", "status": 400}}
    }

- launch: RunInstances of a listed instance type fails with that EC2 error code and HTTP status
  (real EC2 answers capacity errors with 5xx, moto's own errors are 400; both shapes are wanted).
- fleet: an instant CreateFleet of a listed instance type answers 200 with that code in
  Errors[] and no instance, as EC2 does; with "partial": true the instance is launched and the
  error entry is added beside it.
- fleet_http: a CreateFleet of a listed instance type fails as a whole with that code and HTTP
  status (an API error, not a per-instance one).
- launch_answer_delay: RunInstances answers this many seconds after moto made the instance (a
  slow answer: the instance exists while the caller has not heard of it yet).
- spot_min_price: a spot RunInstances whose MaxPrice is below it fails with SpotMaxPriceTooLow.
- throttle: every EC2 request fails with that code and status.
- reservations: capacity reservations and how many instances each holds (moto implements none).
  A launch targeting one that is full fails with ReservationCapacityExceeded, one targeting an
  unknown id with InvalidCapacityReservationId.NotFound.
- persistent spot requests (SpotInstanceType=persistent), which moto does not model, are emulated:
  the instance gets a SpotInstanceRequestId, CancelSpotInstanceRequests cancels it, and
  terminating an instance whose request is still open logs "LEAK: … left open" (EC2 would launch
  a replacement).
- interrupt: these instances are reclaimed as the spot market does it (terminated, with the state
  reason Server.SpotInstanceTermination) before the request is answered.
- describe_misses: the next N DescribeInstances calls that name instance ids answer
  InvalidInstanceID.NotFound, as EC2's eventually consistent reads can right after a create
  (counted from when the key appears; removing it resets the count).
- autoscaling: an Auto Scaling action (SetDesiredCapacity, DescribeAutoScalingGroups, PutWarmPool,
  ...) fails with that code and status, in the query protocol's error shape, changing nothing.

- service_quotas: applied values of EC2 quotas by code ({"L-DB2E81BA": 32}). moto's Service Quotas
  knows only VPC's defaults; here GetServiceQuota for service "ec2" answers a listed code with its
  value and any other with NoSuchResourceException (no applied value, as for an account that never
  asked for an increase), and GetAWSDefaultServiceQuota (which moto lacks) answers EC2's GPU
  family quotas with DEFAULT_EC2_QUOTAS (made-up defaults, vCPUs).

A failed call creates nothing, as on EC2.
"""

import json
import re
import sys
import time
import uuid

from moto.autoscaling.responses import AutoScalingResponse
from moto.ec2.models.instances import StateReason
from moto.ec2.responses import EC2Response
from moto.server import main
from moto.servicequotas.responses import ServiceQuotasResponse

FAULTS = sys.argv[2]


def faults():
    try:
        with open(FAULTS) as f:
            text = f.read()
    except FileNotFoundError:
        return {}
    return json.loads(text) if text.strip() else {}


def ec2_error(code, message, status):
    body = (
        '<?xml version="1.0" encoding="UTF-8"?>'
        f"<Response><Errors><Error><Code>{code}</Code><Message>{message}</Message></Error>"
        f"</Errors><RequestID>{uuid.uuid4()}</RequestID></Response>"
    )
    return status, {"Content-Type": "text/xml", "status": status}, body


original_call_action = EC2Response.call_action


SPOT = "Server.SpotInstanceTermination"


def interrupt(backend, instance_ids):
    for instance_id in instance_ids:
        instance = backend.get_instance(instance_id)
        if instance.state_reason.code != SPOT:
            instance.terminate()
            instance.state_reason = StateReason(f"{SPOT}: Spot instance termination", SPOT)


RESERVED = {}  # reservation id -> instances launched into it
OPEN_SPOT_REQUESTS = {}  # persistent spot request id -> instance id


def persistent_spot(self, status, headers, body):
    """Gives the instance a persistent spot request, as EC2 would."""
    if int(status) != 200:
        return status, headers, body
    for instance_id in re.findall(r"<instanceId>(i-[0-9a-f]+)</instanceId>", str(body)):
        request_id = "sir-" + instance_id[2:]
        self.ec2_backend.get_instance(instance_id).spot_instance_request_id = request_id
        OPEN_SPOT_REQUESTS[request_id] = instance_id
    return status, headers, body


def cancel_spot_requests(self):
    items = ""
    for request_id in self._get_param("SpotInstanceRequestIds", []):
        if OPEN_SPOT_REQUESTS.pop(request_id, None) is None:
            return ec2_error(
                "InvalidSpotInstanceRequestID.NotFound",
                f"The spot instance request ID '{request_id}' does not exist",
                400,
            )
        print(f"cancelled spot request {request_id}", flush=True)
        items += (
            f"<item><spotInstanceRequestId>{request_id}</spotInstanceRequestId>"
            "<state>cancelled</state></item>"
        )
    body = (
        '<?xml version="1.0" encoding="UTF-8"?>'
        '<CancelSpotInstanceRequestsResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">'
        f"<requestId>{uuid.uuid4()}</requestId>"
        f"<spotInstanceRequestSet>{items}</spotInstanceRequestSet>"
        "</CancelSpotInstanceRequestsResponse>"
    )
    return 200, {"Content-Type": "text/xml", "status": 200}, body


def instance_types(value):
    """Every InstanceType inside a parsed request parameter."""
    if isinstance(value, dict):
        found = [value["InstanceType"]] if isinstance(value.get("InstanceType"), str) else []
        return found + [t for v in value.values() for t in instance_types(v)]
    if isinstance(value, list):
        return [t for v in value for t in instance_types(v)]
    return []


MISSED = [0]


def call_action(self):
    f = faults()
    interrupt(self.ec2_backend, f.get("interrupt", []))
    if "describe_misses" not in f:
        MISSED[0] = 0
    elif self._get_action() == "DescribeInstances" and self._get_param("InstanceIds", []):
        if MISSED[0] < int(f["describe_misses"]):
            MISSED[0] += 1
            ids = ", ".join(self._get_param("InstanceIds", []))
            return ec2_error(
                "InvalidInstanceID.NotFound", f"The instance ID '{ids}' does not exist", 400
            )
    throttle = f.get("throttle")
    if throttle:
        return ec2_error(
            throttle.get("code", "RequestLimitExceeded"),
            "Request limit exceeded.",
            throttle.get("status", 503),
        )
    action = self._get_action()
    if action == "CancelSpotInstanceRequests":
        return cancel_spot_requests(self)
    if action == "TerminateInstances":
        for instance_id in self._get_param("InstanceIds", []):
            for request_id, owner in OPEN_SPOT_REQUESTS.items():
                if owner == instance_id:
                    print(f"LEAK: spot request {request_id} left open", flush=True)
    if action == "CreateFleet":
        types = instance_types(self._get_param("LaunchTemplateConfigs", []))
        failing = next((f["fleet_http"][t] for t in types if t in f.get("fleet_http", {})), None)
        if failing:
            return ec2_error(
                failing["code"], f"injected {failing['code']}", failing.get("status", 500)
            )
        fault = next((f["fleet"][t] for t in types if t in f.get("fleet", {})), None)
        if fault:
            item = (
                f"<item><lifecycle>on-demand</lifecycle><errorCode>{fault['code']}</errorCode>"
                f"<errorMessage>injected {fault['code']}</errorMessage></item>"
            )
            if fault.get("partial"):
                status, headers, body = original_call_action(self)
                body = body.decode() if isinstance(body, bytes) else body
                body = re.sub(r"<errorSet\s*/>|<errorSet>\s*</errorSet>", "", body)
                body = body.replace(
                    "</CreateFleetResponse>", f"<errorSet>{item}</errorSet></CreateFleetResponse>"
                )
                return status, headers, body
            body = (
                '<?xml version="1.0" encoding="UTF-8"?>'
                '<CreateFleetResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">'
                f"<requestId>{uuid.uuid4()}</requestId><fleetId>fleet-{uuid.uuid4()}</fleetId>"
                f"<errorSet>{item}</errorSet><fleetInstanceSet/></CreateFleetResponse>"
            )
            return 200, {"Content-Type": "text/xml", "status": 200}, body
    if action == "RunInstances":
        instance_type = self._get_param("InstanceType")
        fault = f.get("launch", {}).get(instance_type)
        if fault:
            return ec2_error(
                fault["code"],
                f"injected {fault['code']} for {instance_type}",
                fault.get("status", 400),
            )
        max_price = self._get_param("InstanceMarketOptions.SpotOptions.MaxPrice")
        floor = f.get("spot_min_price")
        if max_price is not None and floor is not None and float(max_price) < float(floor):
            return ec2_error(
                "SpotMaxPriceTooLow",
                f"Your Spot request price of {max_price} is lower than the minimum required "
                f"Spot request fulfillment price of {floor}.",
                400,
            )
        target = self._get_param(
            "CapacityReservationSpecification.CapacityReservationTarget.CapacityReservationId"
        )
        if target is not None:
            size = f.get("reservations", {}).get(target)
            if size is None:
                return ec2_error(
                    "InvalidCapacityReservationId.NotFound",
                    f"The capacity reservation ID '{target}' does not exist",
                    400,
                )
            if RESERVED.get(target, 0) >= size:
                return ec2_error(
                    "ReservationCapacityExceeded",
                    f"The targeted capacity reservation {target} has no available capacity",
                    400,
                )
            status, headers, body = original_call_action(self)
            if int(status) == 200:
                RESERVED[target] = RESERVED.get(target, 0) + 1
            return status, headers, body
        if self._get_param("InstanceMarketOptions.SpotOptions.SpotInstanceType") == "persistent":
            return persistent_spot(self, *original_call_action(self))
        if f.get("launch_answer_delay"):
            answer = original_call_action(self)
            time.sleep(float(f["launch_answer_delay"]))
            return answer
    return original_call_action(self)


EC2Response.call_action = call_action

original_autoscaling_call_action = AutoScalingResponse.call_action


def autoscaling_call_action(self):
    fault = faults().get("autoscaling", {}).get(self._get_action())
    if fault:
        status = fault.get("status", 400)
        body = (
            '<ErrorResponse xmlns="http://autoscaling.amazonaws.com/doc/2011-01-01/">'
            f"<Error><Type>{'Receiver' if status >= 500 else 'Sender'}</Type>"
            f"<Code>{fault['code']}</Code><Message>injected {fault['code']}</Message></Error>"
            f"<RequestId>{uuid.uuid4()}</RequestId></ErrorResponse>"
        )
        return status, {"Content-Type": "text/xml", "status": status}, body
    return original_autoscaling_call_action(self)


AutoScalingResponse.call_action = autoscaling_call_action

DEFAULT_EC2_QUOTAS = {
    "L-DB2E81BA": ("Running On-Demand G and VT instances", 64.0),
    "L-417A185B": ("Running On-Demand P instances", 384.0),
    "L-3819A6DF": ("All G and VT Spot Instance Requests", 64.0),
    "L-7212CCBC": ("All P Spot Instance Requests", 384.0),
}


def quota_body(code, value, region):
    name = DEFAULT_EC2_QUOTAS.get(code, (code, 0.0))[0]
    return json.dumps({"Quota": {
        "ServiceCode": "ec2",
        "ServiceName": "Amazon Elastic Compute Cloud (Amazon EC2)",
        "QuotaArn": f"arn:aws:servicequotas:{region}:123456789012:ec2/{code}",
        "QuotaCode": code,
        "QuotaName": name,
        "Value": float(value),
        "Unit": "None",
        "Adjustable": True,
        "GlobalQuota": False,
    }})


def no_such_quota(code):
    body = json.dumps({"__type": "NoSuchResourceException", "message": f"The request failed because the specified quota {code} has no applied value."})
    return 400, {"Content-Type": "application/x-amz-json-1.1", "status": 400}, body


original_get_service_quota = ServiceQuotasResponse.get_service_quota


def get_service_quota(self):
    params = json.loads(self.body)
    if params.get("ServiceCode") != "ec2":
        return original_get_service_quota(self)
    code = params.get("QuotaCode")
    applied = faults().get("service_quotas", {})
    if code not in applied:
        return no_such_quota(code)
    return quota_body(code, applied[code], self.region)


def get_aws_default_service_quota(self):
    params = json.loads(self.body)
    code = params.get("QuotaCode")
    if params.get("ServiceCode") != "ec2" or code not in DEFAULT_EC2_QUOTAS:
        return no_such_quota(code)
    return quota_body(code, DEFAULT_EC2_QUOTAS[code][1], self.region)


ServiceQuotasResponse.get_service_quota = get_service_quota
ServiceQuotasResponse.get_aws_default_service_quota = get_aws_default_service_quota
ServiceQuotasResponse.get_a_w_s_default_service_quota = get_aws_default_service_quota

if __name__ == "__main__":
    main(["-H", "127.0.0.1", "-p", sys.argv[1]])
