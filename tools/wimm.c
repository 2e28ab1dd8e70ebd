/* wimm: command-line tool of the wimm library.
 *
 *   wimm info [--json]          fabrics usable here and their limits
 *   wimm pingpong [flags] [HOST] latency of the four notification strategies
 *   wimm rate [flags] [HOST]     message rate of the same
 *   wimm bulk [flags] [HOST]     one large transfer in chunks (bulk.c)
 *   wimm kv ...                  the key-value slot pool service (kv_cmd.c)
 *   wimm log SUBCOMMAND ...       the remote log service (log_cmd.c)
 *   wimm ps serve|stat|worker     the parameter server (ps_cmd.c)
 */
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "doctor.h"
#include "kv_cmd.h"
#include "log_cmd.h"
#include "ps_cmd.h"

static int run_info(int argc, char **argv)
{
	int json = 0;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--json") == 0) {
			json = 1;
		} else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
			cli_usage_command(stdout, "info");
			return 0;
		} else {
			fprintf(stderr, "wimm: info: unexpected argument '%s'\n", argv[i]);
			cli_usage_command(stderr, "info");
			return 2;
		}
	}
	int rc = wimm_describe_fabrics(stdout, json);
	if (rc < 0)
		cli_fail(NULL, rc, "describe fabrics");
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		cli_usage_command(stderr, "");
		return 2;
	}
	const char *command = argv[1];
	if (strcmp(command, "-h") == 0 || strcmp(command, "--help") == 0 ||
	    strcmp(command, "help") == 0) {
		cli_usage(stdout);
		return 0;
	}
	if (strcmp(command, "--version") == 0 || strcmp(command, "version") == 0) {
		printf("wimm %d.%d.%d\n", WIMM_VERSION_MAJOR, WIMM_VERSION_MINOR,
		       WIMM_VERSION_PATCH);
		return 0;
	}
	if (strcmp(command, "info") == 0)
		return run_info(argc - 1, argv + 1);
	if (strcmp(command, "doctor") == 0)
		return doctor_main(argc - 1, argv + 1);
	if (strcmp(command, "kv") == 0)
		return kv_main(argc - 1, argv + 1);
	if (strcmp(command, "log") == 0)
		return log_main(argc - 1, argv + 1);
	if (strcmp(command, "ps") == 0)
		return ps_main(argc - 1, argv + 1);

	enum bench_mode mode;
	if (strcmp(command, "pingpong") == 0) {
		mode = BENCH_PINGPONG;
	} else if (strcmp(command, "rate") == 0) {
		mode = BENCH_RATE;
	} else if (strcmp(command, "bulk") == 0) {
		mode = BENCH_BULK;
	} else {
		fprintf(stderr, "wimm: unknown command '%s' (wimm --help lists them)\n", command);
		cli_usage_command(stderr, "");
		return 2;
	}
	struct bench_opts opts;
	bench_parse(mode, argc - 1, argv + 1, &opts);
	return bench_run(&opts);
}
