"""The Fabric course's Customer jobs as tests/test_seed_examples.py replays them (the demo's
own are in examples/jobs/Customer.py).

userJob1 is the course's loop, 50 ms a loop, so that the course's second STARTJOB finds the
first one running, as its transcript shows: 2000 loops take 100 s unless the job is stopped,
and the test stops it (STOPJOB) long before.
"""

import time

from fabricjobs.jobs.context import current_job


def userJob1(loopsIterationCount: int = 5):
    job = current_job()
    job.logger.info("looping %d times", loopsIterationCount)
    until = time.monotonic() + 0.05 * loopsIterationCount
    while time.monotonic() < until:  # until done or stopped
        if job.is_aborted():
            raise InterruptedError("stopped")
        time.sleep(0.05)
    return {"result": f"Loop executed {loopsIterationCount} times"}


def userJob6():
    """The course's recurring job body."""
    for i in range(5):
        current_job().logger.info("i=%d", i)


def params(first_param: str, second_param: str):
    """The course's Args example: custom parameters, by name."""
    return {"first_param": first_param, "second_param": second_param}
