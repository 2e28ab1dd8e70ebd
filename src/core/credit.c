#include "core/credit.h"

#include "wimm.h"

void wimm_credit_tx_init(struct wimm_credit_tx *tx, uint32_t peer_depth)
{
	tx->peer_depth = peer_depth;
	tx->sent = 0;
}

uint32_t wimm_credit_tx_available(const struct wimm_credit_tx *tx, uint64_t peer_released)
{
	uint64_t outstanding = peer_released >= tx->sent ? 0 : tx->sent - peer_released;

	return outstanding >= tx->peer_depth ? 0 : (uint32_t)(tx->peer_depth - outstanding);
}

int wimm_credit_tx_take(struct wimm_credit_tx *tx, uint64_t peer_released)
{
	if (wimm_credit_tx_available(tx, peer_released) == 0)
		return WIMM_E_AGAIN;
	tx->sent++;
	return 0;
}

void wimm_credit_rx_init(struct wimm_credit_rx *rx, uint32_t depth, uint32_t batch)
{
	rx->depth = depth;
	if (batch == 0)
		batch = depth / 4;
	if (batch == 0)
		batch = 1;
	rx->batch = batch > depth ? depth : batch;
	rx->delivered = rx->released = rx->returned = 0;
}

void wimm_credit_rx_deliver(struct wimm_credit_rx *rx)
{
	rx->delivered++;
}

uint32_t wimm_credit_rx_pending_release(const struct wimm_credit_rx *rx)
{
	return (uint32_t)(rx->delivered - rx->released);
}

void wimm_credit_rx_release(struct wimm_credit_rx *rx, uint32_t n)
{
	rx->released += n;
}

int wimm_credit_rx_should_return(const struct wimm_credit_rx *rx)
{
	return rx->released - rx->returned >= rx->batch;
}

void wimm_credit_rx_returned(struct wimm_credit_rx *rx)
{
	rx->returned = rx->released;
}
