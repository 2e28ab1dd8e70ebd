/* Fabrics: the backends built into this library, choosing one by URI
 * scheme, "auto", and describing what this machine offers (wimm info). */
#include <stdio.h>
#include <string.h>

#include "core/core.h"

const struct wimm_backend_ops *const wimm_backends[] = {
#ifdef WIMM_HAVE_VERBS
    &wimm_verbs_ops,
#endif
#ifdef WIMM_HAVE_OFI
    &wimm_ofi_ops,
#endif
#ifdef WIMM_HAVE_IPC
    &wimm_ipc_ops,
#endif
    NULL,
};

const struct wimm_backend_ops *wimm_find_backend(const char *scheme, size_t n)
{
	for (int i = 0; wimm_backends[i]; i++)
		if (strlen(wimm_backends[i]->scheme) == n &&
		    strncmp(wimm_backends[i]->scheme, scheme, n) == 0)
			return wimm_backends[i];
	return NULL;
}

/* "auto": the first backend that finds a usable device, else ofi:tcp. */
int wimm_resolve_auto(char *uri, size_t cap)
{
	char spec[64];

	for (int i = 0; wimm_backends[i]; i++) {
		const struct wimm_backend_ops *ops = wimm_backends[i];
		if (ops->auto_probe && ops->auto_probe(spec, sizeof(spec)) == 1) {
			snprintf(uri, cap, "%s:%s", ops->scheme, spec);
			return 0;
		}
	}
	snprintf(uri, cap, "ofi:tcp");
	return 0;
}

int wimm_describe_fabrics(void *file, int json)
{
	FILE *f = file ? file : stdout;
	int first = 1;

	if (json)
		fprintf(f, "{\"fabrics\":[");
	for (int i = 0; wimm_backends[i]; i++) {
		int ret = wimm_backends[i]->describe(f, json, &first);
		if (ret)
			return ret;
	}
	if (json) {
		char uri[128];
		wimm_resolve_auto(uri, sizeof(uri));
		fprintf(f, "],\"auto\":\"%s\"}\n", uri);
	}
	return 0;
}
