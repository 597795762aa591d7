"""The whole Worker: a job service whose jobs send receipts."""

from tickwork import Completed, Failed
from tickwork.cloudflare import job_owner_class, pump_class, worker_class
from tickwork.executors import ExecutorRegistry


async def send_receipt(job, signal):
    if "email" not in job.payload:
        return Failed("no_email")
    return Completed()


def executors(env):
    registry = ExecutorRegistry()
    registry.on_queue("receipts", send_receipt)
    return registry


JobOwner = job_owner_class(executors)
SharedPump = pump_class(executors)
Default = worker_class(executors)
