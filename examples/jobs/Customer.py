"""Example user jobs (the seed's Customer.userJob*), run by the example config.

    startjob user_job name='Customer.userJob1' args='{"loopsIterationCount":"2000"}' uid='uid_test';
"""

import time

from fabricjobs.jobs.context import current_job, fail_job_no_retry


def userJob1(loopsIterationCount: int = 5):
    """Loops, logging each step, and stops early on STOPJOB."""
    job = current_job()
    for i in range(loopsIterationCount):
        if job.is_aborted():
            raise InterruptedError(f"stopped after {i} loops")
        if i < 5:
            job.logger.info("i=%d", i)
    return {"result": f"Loop executed {loopsIterationCount} times"}


def userJob3():
    """The seed's one-time job: logs i=0..3 and takes a second."""
    job = current_job()
    for i in range(4):
        job.logger.info("i=%d", i)
    time.sleep(1)
    return "done"


def userJob6():
    """The seed's recurring job body (start it with EXEC_INTERVAL='0/30 * * * * *')."""
    job = current_job()
    for i in range(5):
        job.logger.info("i=%d", i)
    time.sleep(1)


def sleeper(seconds: float = 3600):
    """Sleeps in one blocking call: STOPJOB can only end it by killing it after the grace period."""
    time.sleep(seconds)
    return f"slept {seconds} s"


def params(first_param: str, second_param: str = ""):
    """Receives its ARGS by name, as the course's examples pass them; without first_param the run
    fails, and is not retried (a missing argument)."""
    return {"first_param": first_param, "second_param": second_param}


def checkArgs(customerId: int, vip: bool = False):
    """Fails without retry when the arguments make no sense."""
    if customerId <= 0:
        fail_job_no_retry(ValueError(f"customerId must be positive, got {customerId}"))
    return {"customerId": customerId, "vip": vip}


def lateExecute(late_job: str, due: str, late_seconds: float):
    """A late handler (IPF's lateExecute): LATE_ACTION='USER_JOB.Customer.lateExecute' starts it
    with the late job's key and due time when one of its fires comes too late."""
    current_job().logger.warning("%s was due at %s and came %.1f s late; skipped", late_job, due, late_seconds)
    return {"late_job": late_job, "due": due}


def onFailure(failed_job: str, run: int, error: str):
    """A failure command (IPF's failureCommand): ON_FAILURE='USER_JOB.Customer.onFailure' starts
    it with the failed job's key, run and error when a run of that job fails for good."""
    current_job().logger.error("%s failed for good in run %d: %s", failed_job, run, error)
    return {"failed_job": failed_job, "run": run}


def ticker(ticks: int = 5, seconds: float = 1.0):
    """Logs a line every ``seconds``, ``ticks`` times (JOBLOG ... FOLLOW shows them as they come)."""
    job = current_job()
    for i in range(1, ticks + 1):
        if job.is_aborted():
            raise InterruptedError(f"stopped after {i - 1} ticks")
        job.logger.info("tick %d of %d", i, ticks)
        time.sleep(seconds)
    return ticks


def billingPart(customers: int = 100, seconds: float = 0.0, task_index: int = 0, task_count: int = 1):
    """One task of a parallel job (STARTJOB ... PARALLELISM=n): bills its share of the
    customers, those whose number modulo n is its index (taking ``seconds``)."""
    job = current_job()
    mine = [c for c in range(customers) if c % task_count == task_index]
    job.logger.info("task %d of %d: %d customers", task_index, task_count, len(mine))
    time.sleep(seconds * (task_index + 1) / task_count)  # the last task takes longest
    return {"task": task_index, "billed": len(mine)}
