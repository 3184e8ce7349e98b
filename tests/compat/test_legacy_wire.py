"""EnumerateDevices of xla.DistributedRuntimeService in jaxlib 0.4.13's own message layout.

jaxlib 0.4.13 calls EnumerateDevices only for GPUs, which this machine lacks, so the
request is built here from the schema jaxlib 0.4.13 itself carries: the serialized
FileDescriptorProto of xla/pjrt/distributed/protocol.proto embedded in its
xla_extension.so. Both servers get the same bytes.
"""

import glob
from pathlib import Path

import pytest

from harness import legacy_client, start_cohort, start_jaxlib_service, tail

grpc = pytest.importorskip("grpc", reason="grpcio is not installed in the pytest venv")
descriptor_pb2 = pytest.importorskip("google.protobuf.descriptor_pb2")
from google.protobuf import descriptor_pool, message_factory  # noqa: E402

CLIENT = legacy_client()
PROTO_NAME = b"xla/pjrt/distributed/protocol.proto"
# What jaxlib 0.4.13's client puts in ConnectRequest.protocol_version (its service
# refuses any other).
PROTOCOL_VERSION = 3


def embedded_schema():
    """The protocol's message classes, from the descriptor inside jaxlib 0.4.13."""
    libs = glob.glob(str(Path(CLIENT.python).parents[1] / "lib" / "python3*" /
                         "site-packages" / "jaxlib" / "xla_extension.so"))
    assert libs, f"no xla_extension.so next to {CLIENT.python}"
    data = Path(libs[0]).read_bytes()
    at = data.find(PROTO_NAME)
    while at >= 0:
        start = at - 2  # field 1 (name): tag 0x0a, one length byte
        if data[start] == 0x0A and data[start + 1] == len(PROTO_NAME):
            for end in range(start + 64, min(start + 16384, len(data))):
                try:
                    fdp = descriptor_pb2.FileDescriptorProto.FromString(data[start:end])
                except Exception:  # not a whole message yet
                    continue
                if fdp.service and fdp.SerializeToString() == data[start:end]:
                    pool = descriptor_pool.DescriptorPool()
                    pool.Add(fdp)
                    return lambda name: message_factory.GetMessageClass(
                        pool.FindMessageTypeByName(f"xla.{name}"))
        at = data.find(PROTO_NAME, at + 1)
    raise AssertionError(f"{PROTO_NAME.decode()} not found in {libs[0]}")


def call(channel, method, request, response_class):
    rpc = channel.unary_unary(f"/xla.DistributedRuntimeService/{method}",
                              request_serializer=lambda m: m.SerializeToString(),
                              response_deserializer=response_class.FromString)
    return rpc(request, timeout=10)


@pytest.mark.skipif(bool(CLIENT.skip_reason), reason=f"{CLIENT.name}: {CLIENT.skip_reason}")
@pytest.mark.parametrize("kind", ["cohort", "jaxlib"])
def test_enumerate_devices_in_jaxlib_0_4_13_layout(request, kind, group):
    schema = embedded_schema()
    topology = schema("LocalTopologyProto")
    # The schema really is the one cohort's differs from.
    assert [(f.name, f.number) for f in topology.DESCRIPTOR.fields] == [
        ("node_id", 1), ("boot_id", 2), ("devices", 3)]
    if kind == "cohort":
        # cohort picks the layout by the protocol version the node connected with.
        server = start_cohort(group, "worker", 1, heartbeat_s=10)
    else:
        server = start_jaxlib_service(group, CLIENT, 1, 10, legacy=True)

    with grpc.insecure_channel(server.address) as channel:
        connected = call(channel, "Connect", schema("ConnectRequest")(
            protocol_version=PROTOCOL_VERSION, timeout_milliseconds=10_000, node_id=0,
            client_id=42), schema("ConnectResponse"))
        local = topology(node_id=0, boot_id="boot-0")
        local.devices.add(local_device_ordinal=0, name="cuda:0", vendor="nvidia")
        try:
            answer = call(channel, "EnumerateDevices", schema("EnumerateDevicesRequest")(
                session_id=connected.session_id, local_topology=local),
                schema("EnumerateDevicesResponse"))
        except grpc.RpcError as e:
            pytest.fail(f"EnumerateDevices failed: {e.code().name} {e.details()!r}\n"
                        f"{tail(server.log())}")
    nodes = answer.global_topology.nodes
    assert len(nodes) == 1
    assert nodes[0].boot_id == "boot-0"
    assert [(d.name, d.vendor, d.global_device_id) for d in nodes[0].devices] == [
        ("cuda:0", "nvidia", 0)]
