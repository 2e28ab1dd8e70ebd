/* `wimm doctor`: options, the report (text or JSON), the verdict. The
 * checks themselves are in doctor_verbs.c and doctor_ofi.c. */
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "doctor.h"

const char *const dr_step_title[DR_STEPS] = {
    [DR_RECV] = "receive posted (ERRATA E1)",
    [DR_QP] = "QP state",
    [DR_KEY] = "remote key and address",
    [DR_ACCESS] = "access rights",
    [DR_CQ] = "CQ overflow",
    [DR_WIRE] = "on the wire",
};

const char *const dr_fault_name[DR_FAULTS] = {
    [DR_FAULT_NONE] = "none",	      [DR_FAULT_QP_RTR] = "qp-rtr",
    [DR_FAULT_MR_DEREG] = "mr-dereg", [DR_FAULT_NO_REMOTE_WRITE] = "no-remote-write",
    [DR_FAULT_CQ_SMALL] = "cq-small", [DR_FAULT_NO_RECV] = "no-recv",
};

static const char *const fault_text[DR_FAULTS] = {
    [DR_FAULT_QP_RTR] = "the sender's QP is left in RTR, never moved to RTS",
    [DR_FAULT_MR_DEREG] = "the receiver deregisters its window after handing out the rkey",
    [DR_FAULT_NO_REMOTE_WRITE] = "the window is registered without REMOTE_WRITE",
    [DR_FAULT_CQ_SMALL] = "the receiver's CQ has 1 entry for 8 posted receives",
    [DR_FAULT_NO_RECV] = "the receiver posts no receive",
};

static const char *const status_name[] = {[DR_NA] = "n/a", [DR_PASS] = "pass", [DR_FAIL] = "FAIL"};

void dr_cat(char *buf, size_t cap, const char *fmt, ...)
{
	size_t len = strnlen(buf, cap);
	va_list ap;

	if (len + 1 >= cap)
		return;
	va_start(ap, fmt);
	vsnprintf(buf + len, cap - len, fmt, ap);
	va_end(ap);
}

void dr_set(struct dr_report *r, enum dr_step_id s, enum dr_status st, const char *fix,
	    const char *fmt, ...)
{
	va_list ap;

	r->step[s].status = st;
	snprintf(r->step[s].fix, sizeof(r->step[s].fix), "%s", fix);
	va_start(ap, fmt);
	vsnprintf(r->step[s].evidence, sizeof(r->step[s].evidence), fmt, ap);
	va_end(ap);
	r->step[s].cause[0] = '\0';
	if (st == DR_FAIL) {
		char *c = strstr(r->step[s].evidence, ". Cause: ");

		if (c) {
			snprintf(r->step[s].cause, sizeof(r->step[s].cause), "%s", c + 9);
			*c = '\0';
		}
	}
}

int64_t dr_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int dr_parse_fabric(const char *uri, struct dr_fabric *out, char *err, size_t errlen)
{
	const char *name = NULL;

	memset(out, 0, sizeof(*out));
	if (!strncmp(uri, "verbs:", 6)) {
		out->kind = DR_VERBS;
		name = uri + 6;
	} else if (!strncmp(uri, "ofi:", 4)) {
		out->kind = DR_OFI;
		name = uri + 4;
	} else if (!strcmp(uri, "auto")) {
#ifdef DOCTOR_HAVE_VERBS
		if (!dv_auto_device(out->name, sizeof(out->name))) {
			out->kind = DR_VERBS;
			return 0;
		}
#endif
		out->kind = DR_OFI;
		snprintf(out->name, sizeof(out->name), "tcp");
		return 0;
	}
	if (!name || !*name || strlen(name) >= sizeof(out->name) || strchr(name, ' ')) {
		snprintf(err, errlen,
			 "unknown fabric '%s': use verbs:<device> (verbs:rxe0), ofi:tcp, ofi:shm, "
			 "ofi:<provider> or auto",
			 uri);
		return -1;
	}
#ifndef DOCTOR_HAVE_VERBS
	if (out->kind == DR_VERBS) {
		snprintf(err, errlen, "fabric '%s': this wimm was built without rdma-core", uri);
		return -1;
	}
#endif
#ifndef DOCTOR_HAVE_OFI
	if (out->kind == DR_OFI) {
		snprintf(err, errlen, "fabric '%s': this wimm was built without libfabric", uri);
		return -1;
	}
#endif
	snprintf(out->name, sizeof(out->name), "%s", name);
	return 0;
}

static void usage(FILE *f)
{
	fputs("usage: wimm doctor [-f FABRIC] [flags] [HOST]   check a write-with-imm path\n"
	      "       wimm doctor --inject FAULT [-f FABRIC]    reproduce a fault and diagnose it\n"
	      "       wimm doctor --serve [-f FABRIC] [-p PORT] be the peer of a doctor on HOST\n"
	      "\n"
	      "Runs the troubleshooting flow for \"the sender's post succeeded, the receiver\n"
	      "never sees a completion\" on a probe pair: without HOST a loopback pair on the\n"
	      "device, with HOST against `wimm doctor --serve` there. Steps: 0 receive posted\n"
	      "(E1), 1 QP state, 2 remote key and address, 3 access rights, 4 CQ overflow,\n"
	      "5 on the wire (a capture of the probes, decoded). Each is pass, FAIL or n/a,\n"
	      "with evidence and a fix.\n"
	      "\n"
	      "  -f FABRIC      verbs:<device>, ofi:tcp, ofi:shm, ofi:<provider>, auto (default)\n"
	      "  -p PORT        TCP port of the side protocol (default 7472; --serve -p 0:\n"
	      "                 any free one, printed on stderr)\n"
	      "  --gid N        GID index on verbs (default: the first RoCEv2 IPv4 GID)\n"
	      "  --timeout SEC  longest wait for a completion or the peer (default 10)\n"
	      "  --inject FAULT reproduce FAULT on a loopback pair (verbs):\n",
	      f);
	for (int i = 1; i < DR_FAULTS; i++)
		fprintf(f, "                   %-16s %s\n", dr_fault_name[i], fault_text[i]);
	fputs("  --serve        answer doctors on -p PORT (the receiving end of their pair)\n"
	      "  --once         with --serve: answer one doctor, then exit\n"
	      "  --json         one JSON object on stdout\n"
	      "  -v             hex dump of the captured RoCE frames on stderr\n"
	      "  -h, --help     this text\n"
	      "\n"
	      "Exit status: 0 every applicable step passed, 1 a step failed, 2 bad input or\n"
	      "the checks could not run (unknown fabric, no peer, a peer of another version).\n",
	      f);
}

static int parse(int argc, char **argv, struct dr_opts *o)
{
	enum { O_GID = 256, O_TIMEOUT, O_INJECT, O_SERVE, O_ONCE, O_JSON };
	static const struct option lo[] = {{"gid", required_argument, NULL, O_GID},
					   {"timeout", required_argument, NULL, O_TIMEOUT},
					   {"inject", required_argument, NULL, O_INJECT},
					   {"serve", no_argument, NULL, O_SERVE},
					   {"once", no_argument, NULL, O_ONCE},
					   {"json", no_argument, NULL, O_JSON},
					   {"help", no_argument, NULL, 'h'},
					   {NULL, 0, NULL, 0}};
	char *end;
	long v;
	int c;

	*o = (struct dr_opts){
	    .fabric = "auto", .port = DOCTOR_DEFAULT_PORT, .gid_index = -1, .timeout_ms = 10000};
	optind = 1;
	while ((c = getopt_long(argc, argv, "f:p:vh", lo, NULL)) != -1) {
		switch (c) {
		case 'f':
			o->fabric = optarg;
			break;
		case 'p':
		case O_GID:
		case O_TIMEOUT:
			v = strtol(optarg, &end, 10);
			if (*end || end == optarg || v < 0 || v > 65535) {
				fprintf(stderr, "wimm: doctor: bad number '%s'\n", optarg);
				return -1;
			}
			if (c == 'p')
				o->port = (int)v;
			else if (c == O_GID)
				o->gid_index = (int)v;
			else
				o->timeout_ms = v ? (int)v * 1000 : 10000;
			break;
		case O_INJECT:
			for (int i = 1; i < DR_FAULTS; i++)
				if (!strcmp(optarg, dr_fault_name[i]))
					o->fault = (enum dr_fault)i;
			if (!o->fault) {
				fprintf(stderr, "wimm: doctor: unknown fault '%s' (see --help)\n",
					optarg);
				return -1;
			}
			break;
		case O_SERVE:
			o->serve = 1;
			break;
		case O_ONCE:
			o->once = 1;
			break;
		case O_JSON:
			o->json = 1;
			break;
		case 'v':
			o->verbose = 1;
			break;
		case 'h':
			usage(stdout);
			exit(0);
		default:
			return -1;
		}
	}
	if (optind < argc)
		o->host = argv[optind++];
	if (optind < argc) {
		fprintf(stderr, "wimm: doctor: unexpected argument '%s'\n", argv[optind]);
		return -1;
	}
	if (o->fault && (o->host || o->serve)) {
		fprintf(stderr, "wimm: doctor: --inject runs on a loopback pair: give no HOST and "
				"no --serve\n");
		return -1;
	}
	if (!o->serve && !o->port) {
		fprintf(stderr, "wimm: doctor: -p 0 (any free port) is for --serve only\n");
		return -1;
	}
	if (o->serve && o->host) {
		fprintf(stderr, "wimm: doctor: --serve takes no HOST\n");
		return -1;
	}
	return 0;
}

static void json_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;

		if (ch == '"' || ch == '\\')
			fprintf(f, "\\%c", ch);
		else if (ch < 0x20)
			fprintf(f, "\\u%04x", ch);
		else
			fputc(ch, f);
	}
	fputc('"', f);
}

static void print_json(const struct dr_opts *o, const struct dr_report *r, int failed)
{
	fputs("{\"fabric\":", stdout);
	json_str(stdout, r->fabric);
	fputs(",\"inject\":", stdout);
	json_str(stdout, dr_fault_name[o->fault]);
	fputs(",\"setup\":", stdout);
	json_str(stdout, r->setup);
	fputs(",\"probe\":", stdout);
	json_str(stdout, r->probe);
	fputs(",\"sender\":", stdout);
	json_str(stdout, r->sender_saw);
	fputs(",\"receiver\":", stdout);
	json_str(stdout, r->receiver_saw);
	fputs(",\"counters\":", stdout);
	json_str(stdout, r->counters);
	fputs(",\"steps\":[", stdout);
	for (int i = 0; i < DR_STEPS; i++) {
		printf("%s{\"step\":%d,\"title\":", i ? "," : "", i);
		json_str(stdout, dr_step_title[i]);
		printf(",\"status\":\"%s\",\"evidence\":",
		       r->step[i].status == DR_FAIL ? "fail" : status_name[r->step[i].status]);
		json_str(stdout, r->step[i].evidence);
		fputs(",\"cause\":", stdout);
		json_str(stdout, r->step[i].cause);
		fputs(",\"fix\":", stdout);
		json_str(stdout, r->step[i].fix);
		fputc('}', stdout);
	}
	fputs("],\"packets\":[", stdout);
	for (int i = 0; i < r->npkts; i++) {
		const struct roce_pkt *p = &r->pkts[i];

		printf("%s{\"src\":\"%s\",\"dst\":\"%s\",\"opcode\":%u,\"name\":\"%s\","
		       "\"dqpn\":%u,\"psn\":%u,\"payload\":%u",
		       i ? "," : "", p->src, p->dst, p->opcode, roce_opcode_name(p->opcode),
		       p->dqpn, p->psn, p->payload_len);
		if (p->has_reth)
			printf(",\"reth\":{\"va\":%" PRIu64 ",\"rkey\":%u,\"dma_len\":%u}", p->va,
			       p->rkey, p->dma_len);
		if (p->has_imm)
			printf(",\"imm\":%u", p->imm);
		if (p->has_aeth)
			printf(",\"aeth\":\"%s\"", roce_aeth_name(p->syndrome));
		fputc('}', stdout);
	}
	printf("],\"verdict\":{\"status\":\"%s\",\"step\":%d}}\n", failed >= 0 ? "fail" : "pass",
	       failed);
}

static void print_text(const struct dr_opts *o, const struct dr_report *r, int failed)
{
	int n[3] = {0, 0, 0};

	printf("wimm doctor: %s\n", r->fabric);
	printf("  setup:    %s\n", r->setup);
	if (o->fault)
		printf("  inject:   %s (%s)\n", dr_fault_name[o->fault], fault_text[o->fault]);
	printf("  probe:    %s\n", r->probe);
	printf("  sender:   %s\n", r->sender_saw);
	printf("  receiver: %s\n", r->receiver_saw);
	printf("  counters: %s\n", r->counters);
	for (int i = 0; i < DR_STEPS; i++) {
		const struct dr_step *s = &r->step[i];

		n[s->status]++;
		printf("[%s] step %d, %s\n", status_name[s->status], i, dr_step_title[i]);
		printf("       %s\n", s->evidence);
		if (s->cause[0])
			printf("       cause: %s\n", s->cause);
		if (s->status == DR_FAIL && s->fix[0])
			printf("       fix: %s\n", s->fix);
	}
	if (r->npkts)
		printf("packets captured (sender's netdev):\n");
	for (int i = 0; i < r->npkts; i++) {
		const struct roce_pkt *p = &r->pkts[i];

		printf("  %2d %s > %s qp 0x%x psn %u %s", i + 1, p->src, p->dst, p->dqpn, p->psn,
		       roce_opcode_name(p->opcode));
		if (p->has_reth)
			printf(" RETH va 0x%" PRIx64 " rkey 0x%x len %u", p->va, p->rkey,
			       p->dma_len);
		if (p->has_imm)
			printf(" ImmDt 0x%08x", p->imm);
		if (p->has_aeth)
			printf(" AETH %s", roce_aeth_name(p->syndrome));
		printf(" payload %u\n", p->payload_len);
	}
	if (failed >= 0)
		printf("verdict: FAIL at step %d, %s: %s\n", failed, dr_step_title[failed],
		       r->step[failed].cause[0] ? r->step[failed].cause : r->step[failed].evidence);
	else
		printf("verdict: healthy: %d steps pass, %d n/a, none failed\n", n[DR_PASS],
		       n[DR_NA]);
}

int doctor_main(int argc, char **argv)
{
	static struct dr_report r;
	struct dr_fabric f;
	struct dr_opts o;
	char err[512] = "";
	int rc = -1, failed = -1;

	if (parse(argc, argv, &o)) {
		usage(stderr);
		return 2;
	}
	if (dr_parse_fabric(o.fabric, &f, err, sizeof(err))) {
		fprintf(stderr, "wimm: doctor: %s\n", err);
		return 2;
	}
	if (o.fault && f.kind != DR_VERBS) {
		fprintf(stderr, "wimm: doctor: --inject needs a verbs device (-f verbs:<device>): "
				"the faults are states of verbs QPs, MRs and CQs\n");
		return 2;
	}
	if (o.serve)
		return dp_serve(&o, &f) ? 2 : 0;
	memset(&r, 0, sizeof(r));
	snprintf(r.fabric, sizeof(r.fabric), "%s:%s", f.kind == DR_VERBS ? "verbs" : "ofi", f.name);
#ifdef DOCTOR_HAVE_VERBS
	if (f.kind == DR_VERBS)
		rc = dv_run(&o, &f, &r, err, sizeof(err));
#endif
#ifdef DOCTOR_HAVE_OFI
	if (f.kind == DR_OFI)
		rc = do_run(&o, &f, &r, err, sizeof(err));
#endif
	if (rc) {
		fprintf(stderr, "wimm: doctor: %s: %s\n", r.fabric, err);
		return 2;
	}
	for (int i = DR_STEPS - 1; i >= 0; i--)
		if (r.step[i].status == DR_FAIL)
			failed = i;
	if (o.json)
		print_json(&o, &r, failed);
	else
		print_text(&o, &r, failed);
	return failed >= 0 ? 1 : 0;
}
