/* Unit tests of the send-slot ring (src/core/send_ring.h): room for the
 * user's share and the core's reserve, in-order retirement through the
 * completion that covers an unsignaled run, SEND_DONE only where asked,
 * wrap-around of positions and slot indexes, stale completions, and the
 * error of a flushed operation. */
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "core/send_ring.h"
#include "wimm.h"

static struct wimm_wr wr_of(uint64_t op_seq, int signal, int internal)
{
	return (struct wimm_wr){
	    .op = WIMM_OP_WRITE_IMM, .op_seq = op_seq, .signal = signal, .internal = internal};
}

/* Post one operation the way a backend does: room, signal, push. */
static int post(struct wimm_send_ring *r, uint64_t op_seq, int signal, int internal, uint64_t *pos)
{
	struct wimm_wr wr = wr_of(op_seq, signal, internal);
	int signaled;

	if (!wimm_send_ring_has_room(r, internal))
		return WIMM_E_AGAIN;
	signaled = wimm_send_ring_must_signal(r, signal);
	*pos = wimm_send_ring_head(r);
	wimm_send_ring_push(r, &wr, 100 + (uint32_t)op_seq, signaled);
	return signaled;
}

static void test_init_and_room(void)
{
	struct wimm_send_ring r;
	uint64_t pos;

	CHECK_EQ(wimm_send_ring_init(&r, 0, 4, 0), WIMM_E_INVAL);
	wimm_send_ring_fini(&r);
	CHECK_EQ(wimm_send_ring_init(&r, 1u << 24, 1, 0), WIMM_E_INVAL);
	CHECK_EQ(wimm_send_ring_init(&r, 6, 4, 0), 0);
	CHECK_EQ(wimm_send_ring_slots(&r), 16); /* a power of two over 10 */
	/* The user's share stops at 6, the core's writes go on to 10. */
	for (int i = 0; i < 6; i++)
		CHECK(post(&r, (uint64_t)i, 1, 0, &pos) >= 0);
	CHECK_EQ(post(&r, 6, 1, 0, &pos), WIMM_E_AGAIN);
	for (int i = 0; i < 4; i++)
		CHECK(post(&r, 100, 0, 1, &pos) >= 0);
	CHECK_EQ(post(&r, 100, 0, 1, &pos), WIMM_E_AGAIN);
	CHECK_EQ(wimm_send_ring_outstanding(&r), 10);
	wimm_send_ring_fini(&r);
	wimm_send_ring_fini(&r); /* twice is harmless */

	/* ipc: the shared ring's size wins when it is larger. */
	CHECK_EQ(wimm_send_ring_init(&r, 4, 4, 64), 0);
	CHECK_EQ(wimm_send_ring_slots(&r), 64);
	wimm_send_ring_fini(&r);
}

/* An unsignaled run retires through the signaled completion after it; only
 * the operation that asked reports, with its own op_seq and length. */
static void test_unsignaled_run(void)
{
	struct wimm_send_ring r;
	struct wimm_cqe e;
	uint64_t pos[8];

	CHECK_EQ(wimm_send_ring_init(&r, 16, 4, 0), 0);
	for (int i = 0; i < 3; i++)
		CHECK_EQ(post(&r, (uint64_t)i, 0, 0, &pos[i]), 0);
	CHECK_EQ(post(&r, 3, 1, 0, &pos[3]), 1);
	CHECK_EQ(wimm_send_ring_outstanding(&r), 4);
	memset(&e, 0, sizeof(e));
	CHECK_EQ(wimm_send_ring_complete(&r, pos[3], 0, 0, NULL, &e), 1);
	CHECK_EQ(e.kind, WIMM_CQE_SEND_DONE);
	CHECK_EQ(e.op_seq, 3);
	CHECK_EQ(e.len, 103);
	CHECK_EQ(e.op, WIMM_OP_WRITE_IMM);
	CHECK_EQ(e.internal, 0);
	CHECK_EQ(wimm_send_ring_outstanding(&r), 0);
	/* All its user slots are free again. */
	for (int i = 0; i < 16; i++)
		CHECK(post(&r, 10, 1, 0, &pos[0]) >= 0);
	CHECK_EQ(post(&r, 11, 1, 0, &pos[0]), WIMM_E_AGAIN);
	wimm_send_ring_fini(&r);
}

/* Forced signals: at most every/2 - 1 unsignaled in a row, and a forced
 * completion reports nothing. */
static void test_forced_signal(void)
{
	struct wimm_send_ring r;
	struct wimm_cqe e;
	uint64_t pos, forced = UINT64_MAX;
	int run = 0;

	CHECK_EQ(wimm_send_ring_init(&r, 8, 4, 0), 0);
	for (int i = 0; i < 4; i++) {
		int s = post(&r, (uint64_t)i, 0, 0, &pos);

		CHECK(s >= 0);
		if (s) {
			forced = pos;
			break;
		}
		run++;
	}
	CHECK_EQ(run, 3); /* every = 8 / 2 = 4: the 4th is signaled */
	CHECK_EQ(forced, 3);
	CHECK_EQ(wimm_send_ring_complete(&r, forced, 0, 0, NULL, &e), 0);
	CHECK_EQ(wimm_send_ring_outstanding(&r), 0);
	wimm_send_ring_fini(&r);
}

/* The core's own writes: no SEND_DONE unless asked (the close fence asks),
 * but an error is reported whoever asked, and they never count against the
 * user's share. */
static void test_internal(void)
{
	struct wimm_send_ring r;
	struct wimm_cqe e;
	uint64_t pos;

	CHECK_EQ(wimm_send_ring_init(&r, 2, 2, 0), 0);
	CHECK_EQ(post(&r, 1, 0, 0, &pos), 1); /* every = 2 / 2: all signaled */
	CHECK_EQ(post(&r, 7, 0, 1, &pos), 1);
	CHECK_EQ(wimm_send_ring_complete(&r, pos, 0, 0, NULL, &e), 0);
	CHECK_EQ(post(&r, 8, 1, 1, &pos), 1);
	CHECK_EQ(wimm_send_ring_complete(&r, pos, 0, 0, NULL, &e), 1);
	CHECK_EQ(e.internal, 1);
	CHECK_EQ(e.op_seq, 8);
	CHECK_EQ(post(&r, 9, 0, 1, &pos), 1);
	CHECK_EQ(wimm_send_ring_complete(&r, pos, WIMM_E_DISCONNECTED, 5, NULL, &e), 1);
	CHECK_EQ(e.kind, WIMM_CQE_SEND_ERROR);
	CHECK_EQ(e.status, WIMM_E_DISCONNECTED);
	CHECK_EQ(e.prov_err, 5);
	CHECK_EQ(e.internal, 1);
	/* Both user slots are free: the internal ones took none. */
	CHECK(post(&r, 10, 1, 0, &pos) >= 0);
	CHECK(post(&r, 11, 1, 0, &pos) >= 0);
	CHECK_EQ(post(&r, 12, 1, 0, &pos), WIMM_E_AGAIN);
	wimm_send_ring_fini(&r);
}

/* Positions run past 2^32 and slot indexes wrap many times: the 32-bit
 * (verbs wr_id) and index (ofi cookie) lookups still find each one, and
 * completions that are no longer outstanding are stale. */
static void test_wrap_and_stale(void)
{
	struct wimm_send_ring r;
	struct wimm_cqe e;
	uint64_t pos, prev = 0;

	CHECK_EQ(wimm_send_ring_init(&r, 5, 1, 0), 0);
	/* Start just below 2^32 as if that many had gone before. */
	r.head = r.tail = (1ull << 32) - 20;
	for (int i = 0; i < 1000; i++) {
		CHECK_EQ(post(&r, (uint64_t)i, 1, 0, &pos), 1);
		CHECK_EQ(wimm_send_ring_pos32(&r, (uint32_t)pos), pos);
		CHECK_EQ(wimm_send_ring_pos_of_index(&r, wimm_send_ring_index(&r, pos)), pos);
		CHECK_EQ(wimm_send_ring_complete(&r, wimm_send_ring_pos32(&r, (uint32_t)pos), 0, 0,
						 NULL, &e),
			 1);
		CHECK_EQ(e.op_seq, (uint64_t)i);
		/* The one before is retired: its completion again is stale. */
		if (i) {
			CHECK_EQ(wimm_send_ring_pos32(&r, (uint32_t)prev), UINT64_MAX);
			CHECK_EQ(wimm_send_ring_complete(&r, prev, 0, 0, NULL, &e), 0);
		}
		prev = pos;
	}
	CHECK(wimm_send_ring_head(&r) > (1ull << 32));
	/* Several outstanding across the wrap: each index names its own. */
	uint64_t p[5];
	for (int i = 0; i < 5; i++)
		CHECK_EQ(post(&r, 2000 + (uint64_t)i, 1, 0, &p[i]), 1);
	for (int i = 0; i < 5; i++)
		CHECK_EQ(wimm_send_ring_pos_of_index(&r, wimm_send_ring_index(&r, p[i])), p[i]);
	CHECK_EQ(wimm_send_ring_pos_of_index(&r, wimm_send_ring_slots(&r)), UINT64_MAX);
	/* An index that names no outstanding slot. */
	uint32_t free_idx = wimm_send_ring_index(&r, p[4] + 1);
	CHECK_EQ(wimm_send_ring_pos_of_index(&r, free_idx), UINT64_MAX);
	CHECK_EQ(wimm_send_ring_pos32(&r, (uint32_t)(p[4] + 1)), UINT64_MAX);
	/* The third's completion retires the first two with it. */
	CHECK_EQ(wimm_send_ring_complete(&r, p[2], 0, 0, NULL, &e), 1);
	CHECK_EQ(e.op_seq, 2002);
	CHECK_EQ(wimm_send_ring_outstanding(&r), 2);
	CHECK_EQ(wimm_send_ring_tail(&r), p[3]);
	wimm_send_ring_fini(&r);
}

/* A flushed queue (verbs: the QP in error) completes every operation, the
 * unsignaled ones too, each with an error in post order; then it is empty
 * and the user's share whole again. */
static void test_flush_errors(void)
{
	struct wimm_send_ring r;
	struct wimm_cqe e;
	uint64_t first, pos;

	CHECK_EQ(wimm_send_ring_init(&r, 8, 4, 0), 0);
	CHECK(post(&r, 1, 1, 0, &first) >= 0);
	CHECK(post(&r, 2, 0, 0, &pos) >= 0);
	CHECK(post(&r, 3, 0, 1, &pos) >= 0);
	CHECK(post(&r, 4, 1, 0, &pos) >= 0);
	for (uint64_t i = 0; i < 4; i++) {
		CHECK_EQ(wimm_send_ring_complete(&r, first + i, WIMM_E_DISCONNECTED, 5, NULL, &e),
			 1);
		CHECK_EQ(e.kind, WIMM_CQE_SEND_ERROR);
		CHECK_EQ(e.op_seq, i + 1);
		CHECK_EQ(e.internal, i == 2);
	}
	CHECK_EQ(wimm_send_ring_outstanding(&r), 0);
	for (int i = 0; i < 8; i++)
		CHECK(post(&r, 10, 1, 0, &pos) >= 0);
	CHECK_EQ(post(&r, 11, 1, 0, &pos), WIMM_E_AGAIN);
	wimm_send_ring_fini(&r);
}

int main(void)
{
	test_init_and_room();
	test_unsignaled_run();
	test_forced_signal();
	test_internal();
	test_wrap_and_stale();
	test_flush_errors();
	return 0;
}
