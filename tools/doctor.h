/* `wimm doctor`: the source article's troubleshooting flow for "the
 * sender's post succeeded, the receiver never sees a completion", run as
 * checks on a live pair (loopback, or against `wimm doctor --serve`).
 *
 * doctor_main.c   options, dispatch, the report (text and JSON), verdict
 * doctor_verbs.c  the verbs pair (raw rdma-core), probes, steps 0-5
 * doctor_rx.c     the receiving end, shared by loopback and --serve
 * doctor_proto.c  the versioned TCP side protocol, client and server
 * doctor_wire.c   AF_PACKET capture of RoCEv2 on the sender's netdev
 * doctor_roce.c   the RoCEv2 decoder (BTH, RETH, ImmDt, AETH), pure
 * doctor_ofi.c    libfabric: what applies there, probes through wimm
 */
#ifndef WIMM_DOCTOR_H
#define WIMM_DOCTOR_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "doctor_roce.h"

/* The side protocol's version: peers of another version are refused. */
#define DOCTOR_PROTO_VERSION 1
#define DOCTOR_DEFAULT_PORT 7472

enum dr_status { DR_NA = 0, DR_PASS, DR_FAIL };

/* Step numbers: 0 is the one the article leaves out (ERRATA E1). */
enum dr_step_id {
	DR_RECV = 0,
	DR_QP = 1,
	DR_KEY = 2,
	DR_ACCESS = 3,
	DR_CQ = 4,
	DR_WIRE = 5,
	DR_STEPS = 6,
};

enum dr_fault {
	DR_FAULT_NONE = 0,
	DR_FAULT_QP_RTR,
	DR_FAULT_MR_DEREG,
	DR_FAULT_NO_REMOTE_WRITE,
	DR_FAULT_CQ_SMALL,
	DR_FAULT_NO_RECV,
	DR_FAULTS,
};

#define DR_TEXT 1536
#define DR_MAX_PKTS 48

struct dr_step {
	enum dr_status status;
	char evidence[DR_TEXT];
	char cause[256]; /* a failed step: why the receiver sees nothing */
	char fix[512];
};

struct dr_report {
	char fabric[80];
	char setup[256];      /* what was paired with what */
	char probe[256];      /* what the probes were */
	char sender_saw[512]; /* symptoms, as each end sees them */
	char receiver_saw[768];
	char counters[512]; /* device counters that moved */
	struct dr_step step[DR_STEPS];
	int npkts;
	struct roce_pkt pkts[DR_MAX_PKTS];
};

struct dr_opts {
	const char *fabric; /* "auto" resolved by doctor_main.c */
	const char *host;   /* NULL: loopback pair */
	int port;
	int serve;
	int once; /* --serve: answer one client, then exit */
	int json;
	int verbose;
	enum dr_fault fault;
	int gid_index; /* -1: the first RoCEv2 IPv4 GID */
	int timeout_ms;
};

/* A fabric URI split: kind "verbs" or "ofi", name the device/provider. */
struct dr_fabric {
	enum { DR_VERBS, DR_OFI } kind;
	char name[64];
};

/* doctor_main.c. dr_set formats the evidence; for a failed step the text
 * after ". Cause: " in it becomes the step's cause. */
extern const char *const dr_step_title[DR_STEPS];
extern const char *const dr_fault_name[DR_FAULTS];
void dr_set(struct dr_report *r, enum dr_step_id s, enum dr_status st, const char *fix,
	    const char *fmt, ...) __attribute__((format(printf, 5, 6)));
/* Append to a text buffer of size cap, never past it. */
void dr_cat(char *buf, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int64_t dr_now_ms(void);
int dr_parse_fabric(const char *uri, struct dr_fabric *out, char *err, size_t errlen);

/* `wimm doctor ARGS` (argv[0] is "doctor"): the exit status. */
int doctor_main(int argc, char **argv);
/* doctor_rx.c: the first device with an ACTIVE port (for -f auto); 0 if
 * one was found. */
int dv_auto_device(char *name, size_t cap);

/* doctor_verbs.c: fill the report (0) or say why nothing could be checked
 * (-1, err set). */
int dv_run(const struct dr_opts *o, const struct dr_fabric *f, struct dr_report *r, char *err,
	   size_t errlen);
/* doctor_ofi.c */
int do_run(const struct dr_opts *o, const struct dr_fabric *f, struct dr_report *r, char *err,
	   size_t errlen);
/* doctor_proto.c: `wimm doctor --serve`. */
int dp_serve(const struct dr_opts *o, const struct dr_fabric *f);

#endif
