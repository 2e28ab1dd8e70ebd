/* Unit tests of the context's event backlog (src/core/event_backlog.h):
 * first in, first out across the ring's wrap and across growth (which
 * unwraps the ring), partial takes, room reserved ahead of a batch, and a
 * purge of one connection's events that keeps the others in order. */
#include <stdint.h>

#include "check.h"
#include "core/event_backlog.h"

/* Connections are only compared, never dereferenced. */
static struct wimm_conn *conn_no(uintptr_t k)
{
	return (struct wimm_conn *)(k * 16);
}

static struct wimm_event ev_of(uint32_t imm, uintptr_t conn)
{
	return (struct wimm_event){.type = WIMM_EV_WRITE_IMM, .imm = imm, .conn = conn_no(conn)};
}

static void test_fifo_wrap_and_grow(void)
{
	struct wimm_event_backlog b = {0};
	struct wimm_event out[200];
	uint32_t next_in = 0, next_out = 0;

	CHECK_EQ(wimm_event_backlog_take(&b, out, 0, 8), 0); /* empty, never allocated */
	CHECK_EQ(wimm_event_backlog_reserve(&b, 10), 0);
	CHECK_EQ(b.cap, 64);
	/* Keep 40 in flight while 300 pass: the head wraps the 64-ring. */
	for (int round = 0; round < 30; round++) {
		while (next_in - next_out < 40) {
			struct wimm_event e = ev_of(next_in++, 1);
			CHECK_EQ(wimm_event_backlog_push(&b, &e), 0);
		}
		int got = wimm_event_backlog_take(&b, out, 0, 10);
		CHECK_EQ(got, 10);
		for (int i = 0; i < got; i++)
			CHECK_EQ(out[i].imm, next_out++);
	}
	CHECK_EQ(b.cap, 64);
	CHECK(b.head != 0);
	/* Growth with a wrapped ring keeps the order. */
	while (next_in - next_out < 150) {
		struct wimm_event e = ev_of(next_in++, 1);
		CHECK_EQ(wimm_event_backlog_push(&b, &e), 0);
	}
	CHECK_EQ(b.cap, 256);
	CHECK_EQ(wimm_event_backlog_count(&b), 150);
	/* A take fills from `got` on and stops at n. */
	int got = wimm_event_backlog_take(&b, out, 50, 200);
	CHECK_EQ(got, 200);
	for (int i = 50; i < got; i++)
		CHECK_EQ(out[i].imm, next_out++);
	CHECK_EQ(wimm_event_backlog_count(&b), 0);
	wimm_event_backlog_fini(&b);
	CHECK(b.ev == NULL && b.cap == 0 && b.count == 0);
	wimm_event_backlog_fini(&b); /* twice is harmless */
}

static void test_reserve(void)
{
	struct wimm_event_backlog b = {0};

	/* Room for a batch: pushes after it cannot fail for want of room. */
	CHECK_EQ(wimm_event_backlog_reserve(&b, 100), 0);
	CHECK(b.cap - b.count >= 100);
	size_t cap = b.cap;
	for (uint32_t i = 0; i < 100; i++) {
		struct wimm_event e = ev_of(i, 2);
		CHECK_EQ(wimm_event_backlog_push(&b, &e), 0);
	}
	CHECK_EQ(b.cap, cap);
	CHECK_EQ(wimm_event_backlog_reserve(&b, (size_t)b.cap), 0);
	CHECK(b.cap - b.count >= cap);
	wimm_event_backlog_fini(&b);
}

static void test_purge(void)
{
	struct wimm_event_backlog b = {0};
	struct wimm_event out[64];

	/* Wrap first, so the purge compacts across the ring's end. */
	for (uint32_t i = 0; i < 60; i++) {
		struct wimm_event e = ev_of(i, 1);
		CHECK_EQ(wimm_event_backlog_push(&b, &e), 0);
	}
	CHECK_EQ(wimm_event_backlog_take(&b, out, 0, 60), 60);
	for (uint32_t i = 0; i < 30; i++) {
		struct wimm_event e = ev_of(i, 1 + i % 3);
		CHECK_EQ(wimm_event_backlog_push(&b, &e), 0);
	}
	wimm_event_backlog_purge_conn(&b, conn_no(2));
	CHECK_EQ(wimm_event_backlog_count(&b), 20);
	int got = wimm_event_backlog_take(&b, out, 0, 64);
	CHECK_EQ(got, 20);
	uint32_t want = 0;
	for (int i = 0; i < got; i++, want++) {
		if (want % 3 == 1)
			want++;
		CHECK_EQ(out[i].imm, want);
		CHECK(out[i].conn != conn_no(2));
	}
	/* Purging a connection with nothing queued changes nothing. */
	struct wimm_event e = ev_of(7, 1);
	CHECK_EQ(wimm_event_backlog_push(&b, &e), 0);
	wimm_event_backlog_purge_conn(&b, conn_no(9));
	CHECK_EQ(wimm_event_backlog_count(&b), 1);
	wimm_event_backlog_fini(&b);
}

int main(void)
{
	test_fifo_wrap_and_grow();
	test_reserve();
	test_purge();
	printf("event_backlog: ok\n");
	return 0;
}
