"""Shared-memory regions for the mha.v1 examples' --shm flag (docs/shared-memory.md).

Two POSIX shared-memory objects (Python's multiprocessing.shared_memory, "/psm_..." names), one
for the inputs and one for the outputs, registered with the server through the Open Inference
Protocol's SystemSharedMemoryRegister (the server has one registry, which mha.v1 requests name
too; it needs --allow-client-shm=true). An mha.v1 Tensor then names a place in a region instead
of carrying bytes (Tensor.shared_memory), and a request says where its output goes
(ForwardRequest.output_shared_memory, LayerStepEntry.output_shared_memory); the answer's tensor
carries its dtype, shape and place, no bytes. close() unregisters and unlinks both.
"""
import os
from multiprocessing import shared_memory

from inference import grpc_service_pb2 as ipb, grpc_service_pb2_grpc as ipb_grpc
from mha.v1 import attention_pb2


class ShmRegions:
    def __init__(self, channel, size):
        self._oip = ipb_grpc.GRPCInferenceServiceStub(channel)
        self._objects = {}
        for role in ("in", "out"):
            obj = shared_memory.SharedMemory(create=True, size=size)
            name = f"py-{role}-{os.getpid()}"
            self._objects[role] = (name, obj)
            self._oip.SystemSharedMemoryRegister(ipb.SystemSharedMemoryRegisterRequest(
                name=name, key="/" + obj.name, byte_size=size))

    @staticmethod
    def _place(ref, name, size, offset):
        ref.shared_memory_region = name
        ref.shared_memory_byte_size = size
        ref.shared_memory_offset = offset

    def put(self, tensor, offset=0):
        """`tensor` (an mha.v1 Tensor with data) written into the input region at `offset`: the
        same tensor naming it there, no data."""
        name, obj = self._objects["in"]
        obj.buf[offset:offset + len(tensor.data)] = tensor.data
        placed = attention_pb2.Tensor(dtype=tensor.dtype, shape=tensor.shape)
        self._place(placed.shared_memory, name, len(tensor.data), offset)
        return placed

    def place_output(self, ref, size, offset=0):
        """Fills `ref` (a SharedMemoryRef of a request) with `size` bytes of the output region."""
        self._place(ref, self._objects["out"][0], size, offset)

    def get(self, tensor):
        """An answer's tensor placed in the output region, with its bytes read back as data."""
        name, obj = self._objects["out"]
        at = tensor.shared_memory
        assert at.shared_memory_region == name and not tensor.data, tensor
        begin = at.shared_memory_offset
        return attention_pb2.Tensor(dtype=tensor.dtype, shape=tensor.shape,
                                    data=bytes(obj.buf[begin:begin + at.shared_memory_byte_size]))

    def close(self):
        for name, obj in self._objects.values():
            self._oip.SystemSharedMemoryUnregister(ipb.SystemSharedMemoryUnregisterRequest(
                name=name))
            obj.close()
            obj.unlink()
        self._objects = {}
