/* Flags of `wimm pingpong` and `wimm rate`, in the spirit of perftest. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* Sizes beyond this are refused here rather than by a failed allocation. */
#define CLI_MAX_SIZE (1ull << 30)
#define CLI_MAX_DEPTH 65536u

static const char *const op_names[] = {
    [OP_WRITE_IMM] = "write_imm",   [OP_WRITE_SEND] = "write_send",	[OP_SEND_IMM] = "send_imm",
    [OP_WRITE_POLL] = "write_poll", [OP_WRITE_ATOMIC] = "write_atomic",
};

const char *bench_op_name(enum bench_op op)
{
	return op_names[op];
}

const char *bench_mode_name(enum bench_mode mode)
{
	switch (mode) {
	case BENCH_PINGPONG:
		return "pingpong";
	case BENCH_RATE:
		return "rate";
	case BENCH_BULK:
		return "bulk";
	}
	return "?";
}

const char *bench_wait_name(enum wimm_wait_mode mode)
{
	switch (mode) {
	case WIMM_WAIT_SPIN:
		return "spin";
	case WIMM_WAIT_BLOCK:
		return "block";
	case WIMM_WAIT_ADAPTIVE:
		return "adaptive";
	}
	return "?";
}

static const char usage_commands[] =
    "usage: wimm info [--json]             fabrics usable here and their limits\n"
    "       wimm pingpong [flags] [HOST]   latency (a server without HOST)\n"
    "       wimm rate [flags] [HOST]       message rate (a server without HOST)\n"
    "       wimm bulk [flags] [HOST]       one large transfer in chunks (a server without HOST)\n"
    "       wimm doctor [flags] [HOST]     why a write-with-imm is not seen (wimm doctor --help)\n"
    "       wimm kv serve|put|get|del|stat|bench   the key-value slot pool (wimm kv --help)\n"
    "       wimm log SUBCOMMAND ...        the remote log service: serve, append, tail, stat,\n"
    "                                      bench (wimm log --help)\n"
    "       wimm ps serve|stat|worker      the parameter server (wimm ps --help)\n"
    "       wimm --version | --help\n"
    "       wimm COMMAND --help            the flags of one command\n";

static const char usage_info[] = "usage: wimm info [--json]\n"
				 "  --json        one JSON object instead of text (default: text)\n"
				 "  -h, --help    this text\n";

static const char usage_exit[] = "exit status: 0 done, 1 the run failed (the message says what"
				 " to do), 2 bad command line\n";

static const char *const mode_summary[] = {
    [BENCH_PINGPONG] = "latency",
    [BENCH_RATE] = "message rate",
    [BENCH_BULK] = "one large transfer in chunks",
};

static const char *const mode_epilogue[] = {
    [BENCH_PINGPONG] = "pingpong reports one-way latency = round trip / 2, like ib_write_lat.\n",
    [BENCH_RATE] = "rate streams messages and reports messages/s and bytes/s, like ib_write_bw;\n"
		   "the server's --json line has its CPU time over the timed round.\n",
    [BENCH_BULK] = "bulk moves -s bytes (default: 64M) in --chunk writes, -n times (default: 3),\n"
		   "and reports the time of a transfer; the server's --json line has its CPU\n"
		   "time over the timed transfers. -o must be write_imm (the doorbell).\n",
};

static unsigned default_iters(enum bench_mode mode)
{
	switch (mode) {
	case BENCH_PINGPONG:
		return CLI_PINGPONG_ITERS;
	case BENCH_RATE:
		return CLI_RATE_ITERS;
	case BENCH_BULK:
		return CLI_BULK_ITERS;
	}
	return 1;
}

static void usage_bench(FILE *f, enum bench_mode mode)
{
	fprintf(
	    f,
	    "usage: wimm %s [flags] [HOST]   %s\n"
	    "  -f FABRIC     auto, ofi:tcp, ofi:shm, verbs:rxe0, ... (default: auto)\n"
	    "  -o OP         write_imm | write_send | send_imm | write_poll | write_atomic\n"
	    "                (default: write_imm)\n"
	    "  -s SIZE       message bytes, K/M/G suffixes allowed (default: %s)\n"
	    "  -n ITERS      timed iterations (default: %u)\n"
	    "  -w WARMUP     untimed iterations before (default: %s)\n"
	    "  -p PORT       TCP port (default: %d; --self: a free one)\n"
	    "  -d DEPTH      receive window, doorbells in flight (default: %d; rate: see\n"
	    "                below)\n"
	    "  --wait MODE   spin | block | adaptive (default: spin)\n"
	    "  --self        both ends in this process, two threads with a context each, over\n"
	    "                HOST if given, else 127.0.0.1 (verbs: the address of the\n"
	    "                device's network interface) (default: off)\n"
	    "  --timeout SEC give up when the peer stays silent this long, 0: never (default:\n"
	    "                %d; a server without it waits for its client forever)\n"
	    "  --json        one JSON object on stdout (default: off, a perftest-like table)\n"
	    "  --stats       each side's context counters at the end, on stderr (default: off)\n"
	    "  --memory KIND where window and source live: alloc (wimm_mr_alloc: on ipc the\n"
	    "                window is mapped into the writer) or reg (malloc + wimm_mr_reg:\n"
	    "                copied in by the receiver) (default: alloc)\n"
	    "  --post KIND   how messages are posted: prepared (each operation checked once\n"
	    "                with wimm_prep_new, then wimm_prep_post per message, as perftest\n"
	    "                builds its work request once) or call (wimm_write_imm and the\n"
	    "                others per message) (default: prepared; bulk: always call)\n"
	    "%s"
	    "  -h, --help    this text\n"
	    "\n"
	    "ops: write_imm   one write-with-imm (data + doorbell)\n"
	    "     write_send  plain write, then a 0-byte send-with-imm as the doorbell\n"
	    "     send_imm    two-sided send into a pre-posted receive buffer\n"
	    "     write_poll  plain write; the receiver polls its last byte (SIZE >= 1;\n"
	    "                 it spins whatever --wait says: there is no event to sleep on)\n"
	    "     write_atomic plain write, then a fetch-and-add of 1 on a signal word the\n"
	    "                 receiver polls (needs atomics: ofi:shm, verbs; spins like\n"
	    "                 write_poll)\n"
	    "%s",
	    bench_mode_name(mode), mode_summary[mode], mode == BENCH_BULK ? "64M" : "8",
	    default_iters(mode), mode == BENCH_BULK ? "1" : "ITERS/10", CLI_DEFAULT_PORT,
	    CLI_DEFAULT_DEPTH, CLI_DEFAULT_TIMEOUT_S,
	    mode == BENCH_RATE
		? "  --rate N      client: offer N messages per second in the timed round\n"
		  "                (default: as fast as credits allow)\n"
		  "                without -d the window is the fabric's deepest, at most 256\n"
	    : mode == BENCH_BULK
		? "  --chunk SIZE  bytes per write (default: 64K)\n"
		  "  --notify WHEN each: a write_imm per chunk; last: plain writes and one\n"
		  "                write_imm with the last chunk (default: each)\n"
		: "",
	    mode_epilogue[mode]);
}

void cli_usage(FILE *f)
{
	fputs(usage_commands, f);
	fputs("\n", f);
	fputs(usage_info, f);
	fputs("\n", f);
	usage_bench(f, BENCH_PINGPONG);
	fputs("\nwimm rate and wimm bulk take the same flags and a few of their own (wimm rate"
	      " --help, wimm bulk --help).\n\n",
	      f);
	fputs(usage_exit, f);
}

void cli_usage_command(FILE *f, const char *command)
{
	if (strcmp(command, "info") == 0)
		fputs(usage_info, f);
	else if (strcmp(command, "pingpong") == 0)
		usage_bench(f, BENCH_PINGPONG);
	else if (strcmp(command, "rate") == 0)
		usage_bench(f, BENCH_RATE);
	else if (strcmp(command, "bulk") == 0)
		usage_bench(f, BENCH_BULK);
	else
		fputs(usage_commands, f);
	fprintf(f, "\n%s", usage_exit);
}

/* The command being parsed, for the usage that follows an error. */
static enum bench_mode parsing_mode;

static _Noreturn void usage_error(const char *fmt, const char *arg)
{
	fputs("wimm: ", stderr);
	fprintf(stderr, fmt, arg);
	fputs("\n", stderr);
	usage_bench(stderr, parsing_mode);
	fprintf(stderr, "\n%s", usage_exit);
	exit(2);
}

/* A non-negative decimal number with an optional K/M/G (binary) suffix. */
static unsigned long long parse_count(const char *flag, const char *text, int allow_suffix,
				      unsigned long long max)
{
	const char *p = text;
	while (*p == ' ' || *p == '\t')
		p++;
	if (*p < '0' || *p > '9')
		usage_error("bad value for %s", flag);
	errno = 0;
	char *end;
	unsigned long long value = strtoull(p, &end, 10);
	if (errno != 0)
		usage_error("value for %s is too large", flag);
	unsigned shift = 0;
	if (allow_suffix && *end != '\0' && end[1] == '\0') {
		switch (*end) {
		case 'k':
		case 'K':
			shift = 10;
			break;
		case 'm':
		case 'M':
			shift = 20;
			break;
		case 'g':
		case 'G':
			shift = 30;
			break;
		default:
			usage_error("bad value for %s", flag);
		}
		end++;
	}
	if (*end != '\0')
		usage_error("bad value for %s", flag);
	if (value > (max >> shift))
		usage_error("value for %s is too large", flag);
	return value << shift;
}

static enum bench_op parse_op(const char *text)
{
	for (size_t i = 0; i < sizeof(op_names) / sizeof(op_names[0]); i++)
		if (strcmp(text, op_names[i]) == 0)
			return (enum bench_op)i;
	usage_error("unknown op '%s' (write_imm, write_send, send_imm, write_poll, write_atomic)",
		    text);
}

static enum wimm_wait_mode parse_wait(const char *text)
{
	if (strcmp(text, "spin") == 0)
		return WIMM_WAIT_SPIN;
	if (strcmp(text, "block") == 0)
		return WIMM_WAIT_BLOCK;
	if (strcmp(text, "adaptive") == 0)
		return WIMM_WAIT_ADAPTIVE;
	usage_error("unknown wait mode '%s' (spin, block, adaptive)", text);
}

enum long_only_flag {
	FLAG_JSON = 256,
	FLAG_SELF,
	FLAG_WAIT,
	FLAG_TIMEOUT,
	FLAG_STATS,
	FLAG_RATE,
	FLAG_CHUNK,
	FLAG_NOTIFY,
	FLAG_MEMORY,
	FLAG_POST,
};

/* A positive number of messages per second (decimals allowed). */
static double parse_rate(const char *text)
{
	errno = 0;
	char *end;
	double value = strtod(text, &end);
	if (end == text || *end != '\0' || errno != 0 || !(value > 0) || value > 1e10)
		usage_error("bad value for --rate: '%s' (messages per second, more than 0)", text);
	return value;
}

static int parse_notify(const char *text)
{
	if (strcmp(text, "each") == 0)
		return 1;
	if (strcmp(text, "last") == 0)
		return 0;
	usage_error("unknown --notify '%s' (each, last)", text);
}

/* A flag of one command given to another. */
static void only_for(enum bench_mode mode, const char *flag)
{
	if (parsing_mode != mode)
		usage_error(mode == BENCH_RATE ? "%s is a flag of wimm rate"
					       : "%s is a flag of wimm bulk",
			    flag);
}

void bench_parse(enum bench_mode mode, int argc, char **argv, struct bench_opts *out)
{
	static const struct option long_options[] = {
	    {"json", no_argument, NULL, FLAG_JSON},
	    {"self", no_argument, NULL, FLAG_SELF},
	    {"wait", required_argument, NULL, FLAG_WAIT},
	    {"timeout", required_argument, NULL, FLAG_TIMEOUT},
	    {"stats", no_argument, NULL, FLAG_STATS},
	    {"rate", required_argument, NULL, FLAG_RATE},
	    {"chunk", required_argument, NULL, FLAG_CHUNK},
	    {"notify", required_argument, NULL, FLAG_NOTIFY},
	    {"memory", required_argument, NULL, FLAG_MEMORY},
	    {"post", required_argument, NULL, FLAG_POST},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	int warmup_given = 0;
	parsing_mode = mode;
	unsigned long long timeout_s = CLI_DEFAULT_TIMEOUT_S;

	*out = (struct bench_opts){
	    .mode = mode,
	    .fabric = "auto",
	    .op = OP_WRITE_IMM,
	    .size = mode == BENCH_BULK ? CLI_BULK_SIZE : 8,
	    .iters = default_iters(mode),
	    .chunk = CLI_BULK_CHUNK,
	    .notify_each = 1,
	    .port = CLI_DEFAULT_PORT,
	    .wait_mode = WIMM_WAIT_SPIN,
	    .depth = CLI_DEFAULT_DEPTH,
	};
	optind = 1;
	opterr = 0; /* our own message, then the usage */
	for (;;) {
		int c = getopt_long(argc, argv, ":f:o:s:n:p:w:d:h", long_options, NULL);
		if (c == -1)
			break;
		switch (c) {
		case 'f':
			out->fabric = optarg;
			break;
		case 'o':
			out->op = parse_op(optarg);
			break;
		case 's':
			out->size = (size_t)parse_count("-s", optarg, 1, CLI_MAX_SIZE);
			break;
		case 'n':
			/* The iteration number travels in the 32-bit imm. */
			out->iters = (uint32_t)parse_count("-n", optarg, 1, UINT32_MAX / 2);
			if (out->iters == 0)
				usage_error("%s must be at least 1", "-n");
			break;
		case 'w':
			out->warmup = (uint32_t)parse_count("-w", optarg, 1, UINT32_MAX / 2);
			warmup_given = 1;
			break;
		case 'p':
			out->port = (int)parse_count("-p", optarg, 0, 65535);
			out->port_given = 1;
			break;
		case 'd':
			out->depth = (uint32_t)parse_count("-d", optarg, 1, CLI_MAX_DEPTH);
			if (out->depth == 0)
				usage_error("%s must be at least 1", "-d");
			out->depth_given = 1;
			break;
		case 'h':
			usage_bench(stdout, mode);
			fprintf(stdout, "\n%s", usage_exit);
			exit(0);
		case FLAG_JSON:
			out->json = 1;
			break;
		case FLAG_SELF:
			out->self = 1;
			break;
		case FLAG_STATS:
			out->stats = 1;
			break;
		case FLAG_WAIT:
			out->wait_mode = parse_wait(optarg);
			break;
		case FLAG_RATE:
			only_for(BENCH_RATE, "--rate");
			out->pace_per_s = parse_rate(optarg);
			break;
		case FLAG_CHUNK:
			only_for(BENCH_BULK, "--chunk");
			out->chunk = (size_t)parse_count("--chunk", optarg, 1, CLI_MAX_SIZE);
			if (out->chunk == 0)
				usage_error("%s must be at least 1", "--chunk");
			break;
		case FLAG_NOTIFY:
			only_for(BENCH_BULK, "--notify");
			out->notify_each = parse_notify(optarg);
			break;
		case FLAG_MEMORY:
			if (strcmp(optarg, "alloc") && strcmp(optarg, "reg"))
				usage_error("unknown --memory '%s' (alloc, reg)", optarg);
			out->memory_reg = strcmp(optarg, "reg") == 0;
			break;
		case FLAG_POST:
			if (strcmp(optarg, "prepared") && strcmp(optarg, "call"))
				usage_error("unknown --post '%s' (prepared, call)", optarg);
			out->post_call = strcmp(optarg, "call") == 0;
			break;
		case FLAG_TIMEOUT:
			timeout_s = parse_count("--timeout", optarg, 0, INT_MAX / 1000);
			out->timeout_given = 1;
			break;
		case ':':
			usage_error("%s needs a value", argv[optind - 1]);
		default:
			if (optopt != 0) {
				char flag[3] = {'-', (char)optopt, '\0'};
				usage_error("unknown flag %s", flag);
			}
			usage_error("unknown flag %s", argv[optind - 1]);
		}
	}
	if (optind < argc)
		out->host = argv[optind++];
	if (optind < argc)
		usage_error("unexpected argument '%s'", argv[optind]);
	if (!warmup_given)
		out->warmup = mode == BENCH_BULK ? 1 : out->iters / 10;
	if (mode == BENCH_BULK) {
		if (out->op != OP_WRITE_IMM)
			usage_error("%s", "wimm bulk's doorbell is write_imm: choose the"
					  " notification with --notify each|last, not -o");
		if (out->size == 0)
			usage_error("%s", "wimm bulk needs -s of at least 1");
		if (out->chunk > out->size)
			usage_error("%s", "--chunk is larger than -s: use a chunk of at most -s");
		/* Chunk numbers travel in the 32-bit imm: -s is at most 1 GiB,
		 * so there are fewer than 2^31 chunks. */
	}
	out->timeout_ms = timeout_s == 0 ? -1 : (int)(timeout_s * 1000);
	if (out->op == OP_WRITE_POLL && out->size == 0)
		usage_error("%s", "write_poll needs -s of at least 1 (the last byte is the flag)");
}
