/* Unit tests of the receive-slot counters (src/core/recv_slots.h): slots
 * fill and are posted again in ring order, a release of more than is held
 * is refused and changes nothing, and a full window says so. */
#include <stdint.h>

#include "check.h"
#include "core/recv_slots.h"
#include "wimm.h"

static void test_order_and_wrap(void)
{
	struct wimm_recv_slots r;

	wimm_recv_slots_init(&r, 4);
	for (uint32_t i = 0; i < 4; i++)
		CHECK_EQ(wimm_recv_slots_post_slot(&r, i), i);
	wimm_recv_slots_posted(&r, 4);
	/* Many rounds of deliver 3, release 3: slot numbers wrap in order. */
	for (uint32_t round = 0; round < 100; round++) {
		for (uint32_t k = 0; k < 3; k++) {
			CHECK_EQ(wimm_recv_slots_next(&r), (round * 3 + k) % 4);
			wimm_recv_slots_deliver(&r);
		}
		CHECK_EQ(wimm_recv_slots_held(&r), 3);
		CHECK(!wimm_recv_slots_full(&r));
		CHECK_EQ(wimm_recv_slots_check_release(&r, 3), 0);
		/* The slots posted again are the ones just handed back. */
		CHECK_EQ(wimm_recv_slots_post_slot(&r, 0), (round * 3) % 4);
		wimm_recv_slots_posted(&r, 3);
		wimm_recv_slots_release(&r, 3);
		CHECK_EQ(wimm_recv_slots_held(&r), 0);
	}
}

static void test_release_checked(void)
{
	struct wimm_recv_slots r;

	wimm_recv_slots_init(&r, 2);
	CHECK_EQ(wimm_recv_slots_check_release(&r, 1), WIMM_E_INVAL);
	wimm_recv_slots_deliver(&r);
	CHECK_EQ(wimm_recv_slots_check_release(&r, 2), WIMM_E_INVAL);
	CHECK_EQ(wimm_recv_slots_held(&r), 1); /* the refusal changed nothing */
	wimm_recv_slots_deliver(&r);
	CHECK(wimm_recv_slots_full(&r));
	CHECK_EQ(wimm_recv_slots_check_release(&r, 2), 0);
	wimm_recv_slots_release(&r, 2);
	CHECK(!wimm_recv_slots_full(&r));
	CHECK_EQ(wimm_recv_slots_check_release(&r, 0), 0);
	/* Depth 0 is taken as 1: never a division by zero. */
	wimm_recv_slots_init(&r, 0);
	CHECK_EQ(wimm_recv_slots_next(&r), 0);
	wimm_recv_slots_deliver(&r);
	CHECK(wimm_recv_slots_full(&r));
}

int main(void)
{
	test_order_and_wrap();
	test_release_checked();
	return 0;
}
