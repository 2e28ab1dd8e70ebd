/* wimm_shm_floor: libfabric's shm provider driven directly, without wimm:
 * what the provider itself costs, to tell its share of wimm's ofi:shm
 * figures from wimm's own.
 *
 *   wimm_shm_floor [-m pingpong|stream] [-o write_imm|send] [-U] [-G]
 *                  [-s SIZE] [-n ITERS] [-w WARMUP]
 *
 *   -o write_imm  the calls and attributes wimm's ofi backend uses on shm:
 *                 an RDM endpoint with FI_MSG | FI_RMA | FI_ATOMIC |
 *                 FI_SOURCE | FI_DIRECTED_RECV, write-after-write and
 *                 send-after-write order, a CQ of fi_cq_data_entry read
 *                 with fi_cq_readfrom, and each message one write with CQ
 *                 data into the peer's registered window: up to
 *                 inject_size fi_inject_writedata, above it
 *                 fi_writemsg(FI_REMOTE_CQ_DATA | FI_COMPLETION); the
 *                 receiver sees the immediate in its CQ, as wimm's does.
 *   -o send       what fi_pingpong -p shm -e rdm does: FI_MSG only,
 *                 fi_inject (a send with a completion above inject_size),
 *                 receives re-posted one per completion, fi_cq_read.
 *   -U            write_imm without the order: what shm does when nobody
 *                 asks for it (wimm must: its writes land before the
 *                 doorbell that follows them).
 *   -G            write_imm injected through fi_writemsg(FI_INJECT |
 *                 FI_REMOTE_CQ_DATA), the provider's general path, as wimm
 *                 posted until 2026-12-07.
 *   -m pingpong   ITERS round trips; avg_us is their time over 2 x ITERS,
 *                 the one-way average fi_pingpong prints.
 *   -m stream     ITERS messages back to back (the provider's queue is the
 *                 only window), then a 0-byte (send: 1-byte) answer;
 *                 msg_rate and bw_Bps over the time from the first post to
 *                 the answer, as wimm rate measures.
 *
 * The process forks before it touches libfabric (no provider state is
 * shared); the two ends trade endpoint names and window keys over a
 * socketpair. Each end checks the number of every message it gets (the
 * immediate; send: the first 4 bytes). Prints one JSON object. Not a test:
 * bench/compare-shm-floor.sh runs it beside wimm and fi_pingpong, in turn. */
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#define FLOOR_API FI_VERSION(1, 10)
#define NAME_MAX_LEN 256
#define MAX_SIZE (64u << 20)
/* Receives posted at once (send), bounded to RECV_BYTES of slots. */
#define RECV_SLOTS 64
#define RECV_BYTES (64u << 20)
/* Operations with a completion of their own outstanding at most. */
#define TX_DEPTH 64
/* The immediate (send: first word) of the stream's answer. */
#define ANSWER UINT32_MAX
/* A run that takes longer has lost its other end. */
#define RUN_LIMIT_S 300

enum floor_op { FLOOR_WRITE_IMM, FLOOR_SEND };
enum floor_mode { FLOOR_PINGPONG, FLOOR_STREAM };

struct floor_opts {
	enum floor_op op;
	enum floor_mode mode;
	int unordered;
	int general; /* -G */
	size_t size;
	uint32_t iters, warmup;
};

/* What one end tells the other. */
struct floor_card {
	uint8_t name[NAME_MAX_LEN];
	uint64_t name_len;
	uint64_t window_addr, window_key;
};

struct floor_end {
	const char *role;
	const struct floor_opts *o;
	struct fi_info *info;
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct fid_av *av;
	struct fid_cq *cq;
	struct fid_ep *ep;
	struct fid_mr *src_mr, *win_mr;
	uint8_t *src, *window;
	size_t window_len, slot_len;
	uint32_t slots;
	fi_addr_t peer;
	struct floor_card peer_card;
	uint32_t rx_got;	 /* messages received (answers included) */
	uint32_t rx_last;	 /* the number the last one carried */
	uint32_t tx_outstanding; /* posted with a completion, not yet seen */
};

static void floor_die(const struct floor_end *e, const char *what, int ret)
{
	fprintf(stderr, "wimm_shm_floor: %s: %s: %s\n", e->role, what,
		ret < 0 ? fi_strerror(-ret) : strerror(ret));
	exit(1);
}

static double now_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static struct fi_info *floor_hints(const struct floor_opts *o)
{
	struct fi_info *h = fi_allocinfo();

	if (!h)
		return NULL;
	h->ep_attr->type = FI_EP_RDM;
	h->fabric_attr->prov_name = strdup("shm");
	h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
	h->domain_attr->threading = FI_THREAD_DOMAIN;
	if (o->op == FLOOR_SEND) {
		h->caps = FI_MSG;
		return h;
	}
	h->caps = FI_MSG | FI_RMA | FI_ATOMIC | FI_SOURCE | FI_DIRECTED_RECV;
	if (!o->unordered)
		h->tx_attr->msg_order = FI_ORDER_WAW | FI_ORDER_SAW;
	return h;
}

static void floor_buffers(struct floor_end *e)
{
	size_t size = e->o->size;

	/* Send: a slot per posted receive, so a message is read before
	 * another can land on it. */
	e->slot_len = size ? size : 1;
	e->slots = e->o->op == FLOOR_SEND ? RECV_SLOTS : 1;
	while (e->slots > 2 && (size_t)e->slots * e->slot_len > RECV_BYTES)
		e->slots /= 2;
	e->window_len = ((size_t)e->slots * e->slot_len + 4095) & ~(size_t)4095;
	e->src = aligned_alloc(4096, e->window_len);
	e->window = aligned_alloc(4096, e->window_len);
	if (!e->src || !e->window)
		floor_die(e, "aligned_alloc", ENOMEM);
	/* Touched now: no page fault inside the timed loop. */
	memset(e->src, 0, e->window_len);
	memset(e->window, 0, e->window_len);
}

static void floor_open(struct floor_end *e)
{
	struct fi_info *hints = floor_hints(e->o);
	struct fi_cq_attr cqa = {.format = FI_CQ_FORMAT_DATA, .wait_obj = FI_WAIT_NONE};
	struct fi_av_attr ava = {.type = FI_AV_TABLE};
	int ret;

	if (!hints || !hints->fabric_attr->prov_name)
		floor_die(e, "fi_allocinfo", ENOMEM);
	ret = fi_getinfo(FLOOR_API, NULL, NULL, 0, hints, &e->info);
	fi_freeinfo(hints);
	if (ret)
		floor_die(e, "fi_getinfo (shm, RDM)", ret);
	/* As wimm's backend: windows are addressed by virtual address. */
	e->info->domain_attr->mr_mode |= FI_MR_VIRT_ADDR;
	if ((ret = fi_fabric(e->info->fabric_attr, &e->fabric, NULL)))
		floor_die(e, "fi_fabric", ret);
	if ((ret = fi_domain(e->fabric, e->info, &e->domain, NULL)))
		floor_die(e, "fi_domain", ret);
	if ((ret = fi_cq_open(e->domain, &cqa, &e->cq, NULL)))
		floor_die(e, "fi_cq_open", ret);
	if ((ret = fi_av_open(e->domain, &ava, &e->av, NULL)))
		floor_die(e, "fi_av_open", ret);
	/* shm names an endpoint's region after the process id: one that a
	 * killed process left under our (reused) id fails the first fi_enable
	 * with EBUSY, and shm removes it as it does so. Once more, then. */
	for (int attempt = 0; attempt < 2; attempt++) {
		if ((ret = fi_endpoint(e->domain, e->info, &e->ep, NULL)))
			floor_die(e, "fi_endpoint", ret);
		if ((ret = fi_ep_bind(e->ep, &e->av->fid, 0)))
			floor_die(e, "fi_ep_bind (av)", ret);
		ret =
		    fi_ep_bind(e->ep, &e->cq->fid, FI_TRANSMIT | FI_RECV | FI_SELECTIVE_COMPLETION);
		if (ret)
			floor_die(e, "fi_ep_bind (cq)", ret);
		ret = fi_enable(e->ep);
		if (ret != -FI_EBUSY)
			break;
		fi_close(&e->ep->fid);
	}
	if (ret)
		floor_die(e, "fi_enable", ret);
	floor_buffers(e);
	/* Keys 1 and 2 where the provider does not pick its own. */
	ret = fi_mr_reg(e->domain, e->src, e->window_len, FI_SEND | FI_WRITE, 0, 1, 0, &e->src_mr,
			NULL);
	if (ret)
		floor_die(e, "fi_mr_reg (source)", ret);
	ret = fi_mr_reg(e->domain, e->window, e->window_len, FI_RECV | FI_REMOTE_WRITE, 0, 2, 0,
			&e->win_mr, NULL);
	if (ret)
		floor_die(e, "fi_mr_reg (window)", ret);
}

/* Both ends' cards across the socketpair, then the peer into the AV, then
 * one byte each way: neither sends before the other can place it. */
static void floor_meet(struct floor_end *e, int sock)
{
	struct floor_card mine = {0};
	size_t len = sizeof(mine.name);
	char byte = 1;
	int ret;

	if ((ret = fi_getname(&e->ep->fid, mine.name, &len)))
		floor_die(e, "fi_getname", ret);
	mine.name_len = len;
	mine.window_addr = (uint64_t)(uintptr_t)e->window;
	mine.window_key = fi_mr_key(e->win_mr);
	if (write(sock, &mine, sizeof(mine)) != (ssize_t)sizeof(mine) ||
	    read(sock, &e->peer_card, sizeof(e->peer_card)) != (ssize_t)sizeof(e->peer_card))
		floor_die(e, "trading names with the other end", errno ? errno : EPIPE);
	if (fi_av_insert(e->av, e->peer_card.name, 1, &e->peer, 0, NULL) != 1)
		floor_die(e, "fi_av_insert", EINVAL);
	if (write(sock, &byte, 1) != 1 || read(sock, &byte, 1) != 1)
		floor_die(e, "waiting for the other end", errno ? errno : EPIPE);
}

static void floor_post_recv(struct floor_end *e, uint32_t slot)
{
	struct iovec iov = {.iov_base = e->window + (size_t)slot * e->slot_len,
			    .iov_len = e->slot_len};
	void *desc = fi_mr_desc(e->win_mr);
	struct fi_msg m = {.msg_iov = &iov,
			   .desc = &desc,
			   .iov_count = 1,
			   .addr = e->peer,
			   .context = (void *)(uintptr_t)slot};
	ssize_t ret = fi_recvmsg(e->ep, &m, FI_COMPLETION);

	if (ret)
		floor_die(e, "fi_recvmsg", (int)ret);
}

/* One completion: a message of the peer (its number kept, a receive
 * posted again) or one of our own operations. */
static void floor_take(struct floor_end *e, const struct fi_cq_data_entry *d)
{
	uint32_t num;

	if (e->o->op == FLOOR_WRITE_IMM && (d->flags & FI_REMOTE_CQ_DATA)) {
		num = (uint32_t)d->data;
	} else if (e->o->op == FLOOR_SEND && (d->flags & FI_RECV)) {
		uint32_t slot = (uint32_t)(uintptr_t)d->op_context;
		num = e->rx_got; /* under 4 bytes: not carried */
		if (d->len >= sizeof(num))
			memcpy(&num, e->window + (size_t)slot * e->slot_len, sizeof(num));
		floor_post_recv(e, slot);
	} else {
		e->tx_outstanding--;
		return;
	}
	e->rx_last = num;
	e->rx_got++;
}

/* Read the CQ once (which also drives shm's progress). */
static void floor_poll(struct floor_end *e)
{
	struct fi_cq_data_entry d[16];
	fi_addr_t from[16];
	ssize_t n = e->o->op == FLOOR_WRITE_IMM ? fi_cq_readfrom(e->cq, d, 16, from)
						: fi_cq_read(e->cq, d, 16);

	if (n == -FI_EAGAIN)
		return;
	if (n < 0) {
		struct fi_cq_err_entry err = {0};
		if (n == -FI_EAVAIL && fi_cq_readerr(e->cq, &err, 0) == 1)
			n = -err.err;
		floor_die(e, "reading the completion queue", (int)n);
	}
	for (ssize_t i = 0; i < n; i++)
		floor_take(e, &d[i]);
}

/* Message `num` of `len` bytes to the peer. */
static void floor_send(struct floor_end *e, uint32_t num, size_t len)
{
	int inject = len <= e->info->tx_attr->inject_size;
	ssize_t ret;

	if (!inject)
		while (e->tx_outstanding >= TX_DEPTH)
			floor_poll(e);
	if (len >= sizeof(num))
		memcpy(e->src, &num, sizeof(num));
	for (;;) {
		struct iovec iov = {.iov_base = e->src, .iov_len = len};
		void *desc = fi_mr_desc(e->src_mr);

		if (e->o->op == FLOOR_WRITE_IMM && inject && len && !e->o->general) {
			ret =
			    fi_inject_writedata(e->ep, e->src, len, num, e->peer,
						e->peer_card.window_addr, e->peer_card.window_key);
		} else if (e->o->op == FLOOR_WRITE_IMM) {
			struct fi_rma_iov rma = {.addr = e->peer_card.window_addr,
						 .len = len,
						 .key = e->peer_card.window_key};
			struct fi_msg_rma m = {.msg_iov = &iov,
					       .desc = &desc,
					       .iov_count = len ? 1 : 0,
					       .addr = e->peer,
					       .rma_iov = &rma,
					       .rma_iov_count = 1,
					       .data = num};
			ret = fi_writemsg(e->ep, &m,
					  FI_REMOTE_CQ_DATA | (inject ? FI_INJECT : FI_COMPLETION));
		} else if (inject) {
			ret = fi_inject(e->ep, e->src, len, e->peer);
		} else {
			struct fi_msg m = {
			    .msg_iov = &iov, .desc = &desc, .iov_count = 1, .addr = e->peer};
			ret = fi_sendmsg(e->ep, &m, FI_COMPLETION);
		}
		if (ret != -FI_EAGAIN)
			break;
		floor_poll(e); /* the peer's queue is full: drive progress */
	}
	if (ret)
		floor_die(e, e->o->op == FLOOR_WRITE_IMM ? "fi_writemsg" : "fi_send", (int)ret);
	if (!inject)
		e->tx_outstanding++;
}

/* Until `count` messages have come; the last must carry `num`. */
static void floor_wait(struct floor_end *e, uint32_t count, uint32_t num)
{
	while (e->rx_got < count)
		floor_poll(e);
	if (e->rx_got != count || e->rx_last != num) {
		fprintf(stderr, "wimm_shm_floor: %s: message %u came as %u (%u received)\n",
			e->role, num, e->rx_last, e->rx_got);
		exit(1);
	}
}

static void floor_close(struct floor_end *e)
{
	while (e->tx_outstanding)
		floor_poll(e);
	fi_close(&e->ep->fid);
	fi_close(&e->src_mr->fid);
	fi_close(&e->win_mr->fid);
	fi_close(&e->av->fid);
	fi_close(&e->cq->fid);
	fi_close(&e->domain->fid);
	fi_close(&e->fabric->fid);
	fi_freeinfo(e->info);
	free(e->src);
	free(e->window);
}

/* Round trips: the initiator sends first. */
static void floor_pingpong(struct floor_end *e, int initiator, double *start)
{
	const struct floor_opts *o = e->o;

	for (uint32_t seq = 0; seq < o->warmup + o->iters; seq++) {
		if (initiator && seq == o->warmup)
			*start = now_s();
		if (initiator)
			floor_send(e, seq, o->size);
		floor_wait(e, seq + 1, seq);
		if (!initiator)
			floor_send(e, seq, o->size);
	}
}

/* The warm-up stream and its answer, then the timed one and its answer. */
static void floor_stream(struct floor_end *e, int initiator, double *start)
{
	const struct floor_opts *o = e->o;
	size_t answer_len = o->op == FLOOR_SEND ? 1 : 0;
	uint32_t seq = 0;

	for (int part = 0; part < 2; part++) {
		uint32_t n = part ? o->iters : o->warmup;

		if (initiator) {
			if (part)
				*start = now_s();
			for (uint32_t k = 0; k < n; k++)
				floor_send(e, seq++, o->size);
			/* A 1-byte answer carries no number: the count says it. */
			floor_wait(e, (uint32_t)part + 1, answer_len ? (uint32_t)part : ANSWER);
		} else {
			seq += n;
			floor_wait(e, seq, n ? seq - 1 : e->rx_last);
			floor_send(e, ANSWER, answer_len);
		}
	}
}

static double floor_run(struct floor_end *e, int sock, int initiator)
{
	double start = 0;

	floor_open(e);
	floor_meet(e, sock);
	if (e->o->op == FLOOR_SEND)
		for (uint32_t slot = 0; slot < e->slots; slot++)
			floor_post_recv(e, slot);
	if (e->o->mode == FLOOR_PINGPONG)
		floor_pingpong(e, initiator, &start);
	else
		floor_stream(e, initiator, &start);
	double elapsed = now_s() - start;
	floor_close(e);
	return elapsed;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: wimm_shm_floor [-m pingpong|stream] [-o write_imm|send] [-U]\n"
		   "                      [-s SIZE] [-n ITERS] [-w WARMUP]\n"
		   "  libfabric's shm provider without wimm (write_imm: wimm's calls and\n"
		   "  attributes, -U without its order; send: fi_pingpong's); prints one JSON\n"
		   "  object: the one-way average (pingpong) or the rate (stream)\n");
}

static unsigned long parse_num(const char *s, const char *flag, unsigned long max)
{
	char *end;
	errno = 0;
	unsigned long v = strtoul(s, &end, 10);

	if (errno || end == s || *end || v > max) {
		fprintf(stderr, "wimm_shm_floor: %s %s: a number up to %lu\n", flag, s, max);
		exit(2);
	}
	return v;
}

static void parse_args(int argc, char **argv, struct floor_opts *o)
{
	int warmup_set = 0, opt;

	while ((opt = getopt(argc, argv, "m:o:UGs:n:w:h")) != -1) {
		switch (opt) {
		case 'm':
			if (!strcmp(optarg, "pingpong") || !strcmp(optarg, "stream")) {
				o->mode = optarg[0] == 'p' ? FLOOR_PINGPONG : FLOOR_STREAM;
				break;
			}
			fprintf(stderr, "wimm_shm_floor: -m %s: pingpong or stream\n", optarg);
			exit(2);
		case 'o':
			if (!strcmp(optarg, "write_imm") || !strcmp(optarg, "send")) {
				o->op = optarg[0] == 'w' ? FLOOR_WRITE_IMM : FLOOR_SEND;
				break;
			}
			fprintf(stderr, "wimm_shm_floor: -o %s: write_imm or send\n", optarg);
			exit(2);
		case 'U':
			o->unordered = 1;
			break;
		case 'G':
			o->general = 1;
			break;
		case 's':
			o->size = parse_num(optarg, "-s", MAX_SIZE);
			break;
		case 'n':
			o->iters = (uint32_t)parse_num(optarg, "-n", 1u << 30);
			break;
		case 'w':
			o->warmup = (uint32_t)parse_num(optarg, "-w", 1u << 30);
			warmup_set = 1;
			break;
		case 'h':
			usage(stdout);
			exit(0);
		default:
			usage(stderr);
			exit(2);
		}
	}
	if (optind != argc || o->iters == 0) {
		usage(stderr);
		exit(2);
	}
	if (o->op == FLOOR_SEND && o->size == 0) {
		fprintf(stderr, "wimm_shm_floor: -o send needs -s 1 or more\n");
		exit(2);
	}
	if (o->unordered && o->op != FLOOR_WRITE_IMM) {
		fprintf(stderr, "wimm_shm_floor: -U is for -o write_imm (send asks no order)\n");
		exit(2);
	}
	if (o->general && o->op != FLOOR_WRITE_IMM) {
		fprintf(stderr, "wimm_shm_floor: -G is for -o write_imm\n");
		exit(2);
	}
	if (!warmup_set)
		o->warmup = o->iters / 10;
}

int main(int argc, char **argv)
{
	struct floor_opts o = {
	    .op = FLOOR_WRITE_IMM, .mode = FLOOR_PINGPONG, .size = 8, .iters = 20000};
	int sv[2], status;

	parse_args(argc, argv, &o);
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv)) {
		perror("wimm_shm_floor: socketpair");
		return 1;
	}
	pid_t child = fork();
	if (child < 0) {
		perror("wimm_shm_floor: fork");
		return 1;
	}
	if (child == 0) {
		struct floor_end e = {.role = "responder", .o = &o};
		/* The initiator gone (it failed): so is this end, not a spin
		 * forever. */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() == 1)
			_exit(1);
		alarm(RUN_LIMIT_S);
		close(sv[0]);
		floor_run(&e, sv[1], 0);
		_exit(0);
	}
	close(sv[1]);
	/* A responder that died mid-run leaves this end spinning: bounded. */
	alarm(RUN_LIMIT_S);
	struct floor_end e = {.role = "initiator", .o = &o};
	double t = floor_run(&e, sv[0], 1);
	if (waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status)) {
		fprintf(stderr, "wimm_shm_floor: the responder failed\n");
		return 1;
	}
	printf("{\"tool\": \"wimm_shm_floor\", \"mode\": \"%s\", \"op\": \"%s\", \"ordered\": %s, "
	       "\"general\": %s, \"size\": %zu, \"iters\": %u",
	       o.mode == FLOOR_PINGPONG ? "pingpong" : "stream",
	       o.op == FLOOR_WRITE_IMM ? "write_imm" : "send",
	       o.op == FLOOR_WRITE_IMM && !o.unordered ? "true" : "false",
	       o.general ? "true" : "false", o.size, o.iters);
	if (o.mode == FLOOR_PINGPONG)
		printf(", \"avg_us\": %.4f}\n", t / (2.0 * o.iters) * 1e6);
	else
		printf(", \"msg_rate\": %.1f, \"bw_Bps\": %.1f}\n", o.iters / t,
		       (double)o.iters * (double)o.size / t);
	return 0;
}
