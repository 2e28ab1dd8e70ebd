/* Unit tests of the credit arithmetic (src/core/credit.c): the sender stops
 * at exactly the peer's window, a broken peer's report never grants extra
 * credit, and the receiver returns credits in the batches it promises. */
#include <stdint.h>

#include "check.h"
#include "core/credit.h"
#include "wimm.h"

static void test_tx_take_until_again(void)
{
	struct wimm_credit_tx tx;

	wimm_credit_tx_init(&tx, 4);
	CHECK_EQ(wimm_credit_tx_available(&tx, 0), 4);
	for (int i = 0; i < 4; i++) {
		CHECK_EQ(wimm_credit_tx_take(&tx, 0), 0);
		CHECK_EQ(wimm_credit_tx_available(&tx, 0), 3 - i);
	}
	CHECK_EQ(wimm_credit_tx_take(&tx, 0), WIMM_E_AGAIN);
	CHECK_EQ(wimm_credit_tx_take(&tx, 0), WIMM_E_AGAIN);
	/* A refused take spends nothing. */
	CHECK_EQ(tx.sent, 4);
	CHECK_EQ(wimm_credit_tx_available(&tx, 0), 0);
}

static void test_tx_release_restores(void)
{
	struct wimm_credit_tx tx;

	wimm_credit_tx_init(&tx, 4);
	for (int i = 0; i < 4; i++)
		CHECK_EQ(wimm_credit_tx_take(&tx, 0), 0);
	CHECK_EQ(wimm_credit_tx_available(&tx, 1), 1);
	CHECK_EQ(wimm_credit_tx_available(&tx, 3), 3);
	CHECK_EQ(wimm_credit_tx_available(&tx, 4), 4);
	CHECK_EQ(wimm_credit_tx_take(&tx, 2), 0);
	CHECK_EQ(wimm_credit_tx_take(&tx, 2), 0);
	CHECK_EQ(wimm_credit_tx_take(&tx, 2), WIMM_E_AGAIN);

	/* Many rounds: the total never drifts. */
	wimm_credit_tx_init(&tx, 16);
	uint64_t released = 0;
	for (int round = 0; round < 1000; round++) {
		int taken = 0;

		while (wimm_credit_tx_take(&tx, released) == 0)
			taken++;
		CHECK_EQ(taken, round == 0 ? 16 : 5);
		released += 5;
	}
	CHECK_EQ(tx.sent, 16 + 999 * 5);
}

/* The peer reports more released slots than we ever sent: that counts as
 * all returned, never as more than the window. */
static void test_tx_bogus_report(void)
{
	struct wimm_credit_tx tx;

	wimm_credit_tx_init(&tx, 8);
	CHECK_EQ(wimm_credit_tx_available(&tx, 1000), 8);
	CHECK_EQ(wimm_credit_tx_available(&tx, UINT64_MAX), 8);
	for (int i = 0; i < 3; i++)
		CHECK_EQ(wimm_credit_tx_take(&tx, 0), 0);
	CHECK_EQ(wimm_credit_tx_available(&tx, 4), 8);
	CHECK_EQ(wimm_credit_tx_available(&tx, UINT64_MAX), 8);
	/* After the bogus report, an honest one limits us to the window again:
	 * the bogus value left no residue in the sender's state. */
	CHECK_EQ(tx.sent, 3);
	CHECK_EQ(wimm_credit_tx_available(&tx, 0), 5);
	for (int i = 0; i < 5; i++)
		CHECK_EQ(wimm_credit_tx_take(&tx, 0), 0);
	CHECK_EQ(wimm_credit_tx_take(&tx, 0), WIMM_E_AGAIN);
	CHECK_EQ(wimm_credit_tx_available(&tx, tx.sent - 3), 5);
}

static void test_tx_depth_one(void)
{
	struct wimm_credit_tx tx;

	wimm_credit_tx_init(&tx, 1);
	CHECK_EQ(wimm_credit_tx_take(&tx, 0), 0);
	CHECK_EQ(wimm_credit_tx_take(&tx, 0), WIMM_E_AGAIN);
	CHECK_EQ(wimm_credit_tx_take(&tx, 1), 0);
	CHECK_EQ(wimm_credit_tx_take(&tx, 1), WIMM_E_AGAIN);
}

/* Deliver/release/return cycle with an explicit batch. */
static void test_rx_batching(void)
{
	struct wimm_credit_rx rx;

	wimm_credit_rx_init(&rx, 16, 4);
	CHECK_EQ(rx.batch, 4);
	CHECK_EQ(wimm_credit_rx_should_return(&rx), 0);
	for (int i = 0; i < 3; i++)
		wimm_credit_rx_deliver(&rx);
	CHECK_EQ(wimm_credit_rx_pending_release(&rx), 3);
	wimm_credit_rx_release(&rx, 3);
	CHECK_EQ(wimm_credit_rx_pending_release(&rx), 0);
	CHECK_EQ(wimm_credit_rx_should_return(&rx), 0);
	wimm_credit_rx_deliver(&rx);
	wimm_credit_rx_release(&rx, 1);
	CHECK_EQ(wimm_credit_rx_should_return(&rx), 1);
	wimm_credit_rx_returned(&rx);
	CHECK_EQ(rx.returned, 4);
	CHECK_EQ(wimm_credit_rx_should_return(&rx), 0);

	/* Over many events, what was returned never lags `released` by a
	 * full batch once should_return is honoured. */
	for (int i = 0; i < 1000; i++) {
		wimm_credit_rx_deliver(&rx);
		wimm_credit_rx_release(&rx, wimm_credit_rx_pending_release(&rx));
		if (wimm_credit_rx_should_return(&rx))
			wimm_credit_rx_returned(&rx);
		CHECK(rx.released - rx.returned < rx.batch);
	}
	CHECK_EQ(rx.delivered, 1004);
	CHECK_EQ(rx.released, 1004);
}

static void test_rx_default_batch(void)
{
	struct wimm_credit_rx rx;

	wimm_credit_rx_init(&rx, 64, 0);
	CHECK_EQ(rx.batch, 16);
	wimm_credit_rx_init(&rx, 3, 0);
	CHECK_EQ(rx.batch, 1);
	wimm_credit_rx_init(&rx, 1, 0);
	CHECK_EQ(rx.batch, 1);
	/* A batch larger than the window would deadlock: it is clamped. */
	wimm_credit_rx_init(&rx, 8, 100);
	CHECK(rx.batch <= 8);
	CHECK(rx.batch >= 1);

	/* depth 1: every single release must be returned at once. */
	wimm_credit_rx_init(&rx, 1, 0);
	wimm_credit_rx_deliver(&rx);
	CHECK_EQ(wimm_credit_rx_should_return(&rx), 0);
	wimm_credit_rx_release(&rx, 1);
	CHECK_EQ(wimm_credit_rx_should_return(&rx), 1);
	wimm_credit_rx_returned(&rx);
	CHECK_EQ(wimm_credit_rx_should_return(&rx), 0);
}

/* Sender and receiver accounting together: a sender at zero credit always
 * has a full batch pending at a receiver that keeps polling (no deadlock). */
static void test_tx_rx_together(void)
{
	for (uint32_t depth = 1; depth <= 64; depth++) {
		struct wimm_credit_tx tx;
		struct wimm_credit_rx rx;
		uint64_t word = 0; /* the sender's credit word */
		uint64_t moved = 0;

		wimm_credit_tx_init(&tx, depth);
		wimm_credit_rx_init(&rx, depth, 0);
		for (int step = 0; step < 5000; step++) {
			while (wimm_credit_tx_take(&tx, word) == 0)
				moved++;
			/* Everything in flight arrives and is seen. */
			while (rx.delivered < tx.sent)
				wimm_credit_rx_deliver(&rx);
			wimm_credit_rx_release(&rx, wimm_credit_rx_pending_release(&rx));
			/* The receiver must owe a return now, or we stall. */
			CHECK(wimm_credit_rx_should_return(&rx));
			wimm_credit_rx_returned(&rx);
			word = rx.returned;
			CHECK(wimm_credit_tx_available(&tx, word) > 0);
		}
		CHECK(moved >= 5000);
	}
}

int main(void)
{
	test_tx_take_until_again();
	test_tx_release_restores();
	test_tx_bogus_report();
	test_tx_depth_one();
	test_rx_batching();
	test_rx_default_batch();
	test_tx_rx_together();
	printf("unit.credit: ok\n");
	return 0;
}
