"""The checks shared by the shared-memory service tests (shm_test.py: the Open Inference
Protocol; v1_shm_test.py: mha.v1): a named check that ends the run on failure, and a refusal
with its gRPC code and the texts its message must hold."""
import grpc


def check(condition, what):
    if not condition:
        raise SystemExit("FAIL: " + what)
    print("ok:", what)


def refused(call, code, *texts):
    """`call` fails with `code` and a message holding every text."""
    try:
        call()
    except grpc.RpcError as e:
        details = e.details() or ""
        ok = e.code() == code and all(t in details for t in texts)
        check(ok, f"{code.name} {texts!r} (got {e.code().name}: {details})")
        return
    check(False, f"expected {code.name} {texts!r}, the call succeeded")
