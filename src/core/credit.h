/* Credit accounting: the arithmetic that makes RNR and CQ overrun impossible.
 *
 * The receiver keeps `depth` receive slots posted per connection. The sender
 * starts with `depth` credits and spends one per doorbell (write-with-imm or
 * send-with-imm). The receiver hands a slot back to its receive queue once
 * the application has seen the event (at its next poll), and tells the
 * sender the running total of released slots with a small RDMA write into
 * the sender's credit word, in batches of `batch` so the return costs little.
 * The sender's credits are then  depth - (sent - released_by_peer).
 *
 * Running totals (not deltas) make a lost or repeated credit write harmless
 * and need no atomics: the word only grows.
 *
 * No deadlock: the receiver holds back fewer than `batch` released slots,
 * and batch <= depth, so a sender at zero credits always has at least one
 * full batch pending at a receiver that keeps polling.
 */
#ifndef WIMM_CREDIT_H
#define WIMM_CREDIT_H

#include <stdint.h>

struct wimm_credit_tx {
	uint32_t peer_depth; /* the peer's receive window */
	uint64_t sent;	     /* doorbells posted so far */
};

struct wimm_credit_rx {
	uint32_t depth;	    /* our receive window */
	uint32_t batch;	    /* release this many before telling the peer */
	uint64_t delivered; /* doorbells handed to the application */
	uint64_t released;  /* slots handed back to the receive queue */
	uint64_t returned;  /* `released` as last written to the peer */
};

void wimm_credit_tx_init(struct wimm_credit_tx *tx, uint32_t peer_depth);
/* Credits left, given the peer's last reported release total. A report that
 * claims more than was sent (a broken peer) counts as all returned, never as
 * extra credit. */
uint32_t wimm_credit_tx_available(const struct wimm_credit_tx *tx, uint64_t peer_released);
/* Spend one credit; 0 on success, WIMM_E_AGAIN if none is left. */
int wimm_credit_tx_take(struct wimm_credit_tx *tx, uint64_t peer_released);

/* batch 0 picks depth/4 (at least 1). */
void wimm_credit_rx_init(struct wimm_credit_rx *rx, uint32_t depth, uint32_t batch);
/* One doorbell went to the application. */
void wimm_credit_rx_deliver(struct wimm_credit_rx *rx);
/* Slots seen by the application and not yet re-posted. */
uint32_t wimm_credit_rx_pending_release(const struct wimm_credit_rx *rx);
/* n slots were re-posted. */
void wimm_credit_rx_release(struct wimm_credit_rx *rx, uint32_t n);
/* 1 when enough was released that the peer should be told. */
int wimm_credit_rx_should_return(const struct wimm_credit_rx *rx);
/* The peer was told `released`. */
void wimm_credit_rx_returned(struct wimm_credit_rx *rx);

#endif
