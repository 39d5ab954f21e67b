# Sourced by the scripts: can this machine run the scheduler itself?
host_has_sched_ext() {
	[ "$(id -u)" -eq 0 ] && [ -r /sys/kernel/sched_ext/state ]
}
