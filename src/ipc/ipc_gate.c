/* ipc backend: the gate of a mapped window (ipc_wire.h). A writer stores
 * into the peer's window only between busy = 1 and busy = 0, and only
 * while closed is 0; the window's owner sets closed and then waits for busy
 * to clear. Each side stores one word and then loads the other's, so each
 * needs a full barrier between the two (or both could miss the other).
 *
 * The owner closes once; the writer passes the gate with every message,
 * where a full fence is most of the cost of a small write (measured:
 * docs/performance.md, section 8). So where the kernel allows, the owner
 * pays for both sides: membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED) runs a
 * full barrier on every CPU that runs a thread of a process registered for
 * it (and a thread not running passed one when it was switched out), and a
 * registered writer then needs only a compiler barrier between its store
 * and its load (the pattern of membarrier(2)). The owner announces it in
 * the gate line (`barrier`) only after one such call of its own succeeded;
 * a writer that could not register, or that finds no announcement, fences. */
#include <linux/membarrier.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "ipc/ipc_internal.h"

static long ipc_membarrier(int cmd)
{
	return syscall(SYS_membarrier, cmd, 0);
}

/* Process-wide, found once: 1 yes, -1 no, 0 not asked yet (two threads
 * asking at once both get the same answer). */
static int can_issue, registered;
static pid_t registered_pid;

static int ipc_gate_supported(void)
{
	/* WIMM_IPC_MEMBARRIER=0: the fence on both sides (tests, A/B runs). */
	const char *env = getenv("WIMM_IPC_MEMBARRIER");
	if (env && strcmp(env, "0") == 0)
		return 0;
	long cmds = ipc_membarrier(MEMBARRIER_CMD_QUERY);
	return cmds > 0 && (cmds & MEMBARRIER_CMD_GLOBAL_EXPEDITED) &&
	       (cmds & MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED);
}

/* The owner: can we run the barrier on the writers' CPUs? (A seccomp
 * filter may refuse what the kernel supports: the call is tried.) */
static int ipc_gate_can_issue(void)
{
	int v = __atomic_load_n(&can_issue, __ATOMIC_RELAXED);
	if (v == 0) {
		v = ipc_gate_supported() && ipc_membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED) == 0
			? 1
			: -1;
		__atomic_store_n(&can_issue, v, __ATOMIC_RELAXED);
	}
	return v > 0;
}

int ipc_gate_register(void)
{
	/* The registration belongs to the process's memory map, which a fork
	 * does not pass on: asked again in a new process. */
	pid_t pid = getpid();
	if (__atomic_load_n(&registered_pid, __ATOMIC_RELAXED) != pid) {
		int v = ipc_gate_supported() &&
				ipc_membarrier(MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED) == 0
			    ? 1
			    : -1;
		__atomic_store_n(&registered, v, __ATOMIC_RELAXED);
		__atomic_store_n(&registered_pid, pid, __ATOMIC_RELEASE);
	}
	return __atomic_load_n(&registered, __ATOMIC_RELAXED) > 0;
}

void ipc_gate_offer(struct ipc_conn *c)
{
	if (!c->win_offered || !c->rx.hdr || !ipc_gate_can_issue())
		return;
	/* Ours to keep: the word in the writer's memory is the writer's to
	 * rewrite, which would only unprotect its own stores. */
	c->gate_barrier = 1;
	__atomic_store_n(&c->rx.hdr->barrier, 1, __ATOMIC_RELAXED);
}

void ipc_gate_close(struct ipc_conn *c)
{
	if (!c->win_offered || c->gate_shut || !c->rx.hdr)
		return;
	c->gate_shut = 1;
	__atomic_store_n(&c->rx.hdr->closed, 1, __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	/* Announced to the writer, so it may count on it. Its errors (no
	 * such command, refused by a filter) are the process's, and it
	 * succeeded when we announced it. */
	if (c->gate_barrier)
		(void)ipc_membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED);
	/* A store in progress ends in a memcpy's time; a peer that died
	 * inside one (or stopped) is not waited for beyond a bound. */
	int64_t until = wimm_now_ms() + 100;
	while (__atomic_load_n(&c->rx.hdr->busy, __ATOMIC_ACQUIRE) &&
	       c->down.state == WIMM_DOWN_ALIVE && wimm_now_ms() < until)
		sched_yield();
}
