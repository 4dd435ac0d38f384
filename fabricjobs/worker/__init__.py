"""Worker processes, both sides: the node's pool of them (pool), what runs inside one
(process, runner, guard, reaper, listener), and what lies between (protocol: the pipe's
messages; board: the lease and abort flags in shared memory; node_link: a listener's store
requests over the pipe). Job authors import fabricjobs.jobs, never this."""
