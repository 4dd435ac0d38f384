"""What job authors use: the job context and @job (context), and the job catalog that resolves
a NAME to code (registry; binding of ARGS to parameters, limits of PROCESS jobs). The
machinery that runs jobs is fabricjobs.worker."""
