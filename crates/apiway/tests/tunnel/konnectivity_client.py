#!/usr/bin/python3
"""A konnectivity-client-style dialer written with Python grpcio, from the
same .proto as apiway (proto/konnectivity-client.proto), compiled here with
grpc_tools. It dials DESTINATION through the tunnel server over mutual TLS,
sends PAYLOAD as DATA, reads the echo, closes with CLOSE_REQ and prints what
happened as one JSON object.

usage: konnectivity_client.py PROTO SERVER CA CERT KEY SERVER_NAME DESTINATION PAYLOAD
"""
import importlib
import json
import os
import queue
import sys
import tempfile

import grpc
from grpc_tools import protoc


def main():
    proto, server, ca, cert, key, server_name, destination, payload = sys.argv[1:9]
    payload = payload.encode()
    out = tempfile.mkdtemp()
    include = os.path.dirname(os.path.abspath(proto))
    if protoc.main(["protoc", "-I" + include, "--python_out=" + out,
                    "--grpc_python_out=" + out, os.path.abspath(proto)]) != 0:
        raise SystemExit("protoc failed")
    sys.path.insert(0, out)
    pb = importlib.import_module("konnectivity_client_pb2")
    rpc = importlib.import_module("konnectivity_client_pb2_grpc")

    def read(path):
        with open(path, "rb") as f:
            return f.read()

    creds = grpc.ssl_channel_credentials(
        root_certificates=read(ca), private_key=read(key), certificate_chain=read(cert))
    channel = grpc.secure_channel(
        server, creds, options=[("grpc.ssl_target_name_override", server_name)])
    stub = rpc.ProxyServiceStub(channel)
    sends = queue.Queue()

    def requests():
        while True:
            item = sends.get()
            if item is None:
                return
            yield item

    result = {}
    responses = stub.Proxy(requests(), timeout=20)
    sends.put(pb.Packet(type=pb.DIAL_REQ, dialRequest=pb.DialRequest(
        protocol="tcp", address=destination, random=4242)))
    first = next(responses)
    result["first"] = pb.PacketType.Name(first.type)
    result["random"] = first.dialResponse.random
    result["error"] = first.dialResponse.error
    cid = first.dialResponse.connectID
    result["connect_id"] = cid
    if first.dialResponse.error:
        sends.put(None)
        print(json.dumps(result))
        return
    sends.put(pb.Packet(type=pb.DATA, data=pb.Data(connectID=cid, data=payload)))
    echoed = b""
    while len(echoed) < len(payload):
        p = next(responses)
        if p.type != pb.DATA:
            result["unexpected"] = pb.PacketType.Name(p.type)
            break
        echoed += p.data.data
    result["echoed"] = echoed.decode(errors="replace")
    sends.put(pb.Packet(type=pb.CLOSE_REQ, closeRequest=pb.CloseRequest(connectID=cid)))
    for p in responses:
        if p.type == pb.CLOSE_RSP:
            result["close"] = {"connect_id": p.closeResponse.connectID,
                               "error": p.closeResponse.error}
            break
    sends.put(None)
    # The stream ends with status OK after the close.
    try:
        for _ in responses:
            pass
        result["status"] = "OK"
    except grpc.RpcError as e:
        result["status"] = e.code().name
    print(json.dumps(result))


if __name__ == "__main__":
    main()
