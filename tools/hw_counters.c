/* hw_counters.h: a sysfs reader, nothing device-specific. */
#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "hw_counters.h"

void hw_counters_read(const char *dev, int port, struct hw_counters *c)
{
	char dir[192], path[512];
	struct dirent *de;
	long lifespan = 10;
	FILE *f;
	DIR *d;

	c->n = -1;
	snprintf(dir, sizeof(dir), "/sys/class/infiniband/%s/ports/%d/hw_counters", dev, port);
	d = opendir(dir);
	if (!d)
		return;
	/* The kernel serves a cached copy for `lifespan` ms (rounded up to
	 * jiffies) after each refresh: wait well past it, or "after" could be
	 * the "before" snapshot. */
	snprintf(path, sizeof(path), "%s/lifespan", dir);
	f = fopen(path, "r");
	if (f) {
		if (fscanf(f, "%ld", &lifespan) != 1 || lifespan < 0 || lifespan > 10000)
			lifespan = 10;
		fclose(f);
	}
	usleep((useconds_t)(2 * lifespan + 10) * 1000);
	c->n = 0;
	while ((de = readdir(d)) && c->n < HW_COUNTERS_MAX) {
		long long v;

		/* lifespan is a setting, not a count. */
		if (de->d_name[0] == '.' || strlen(de->d_name) >= sizeof(c->name[0]) ||
		    !strcmp(de->d_name, "lifespan"))
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		f = fopen(path, "r");
		if (!f)
			continue;
		if (fscanf(f, "%lld", &v) == 1) {
			/* Fits: names that do not were skipped above. */
			size_t len = strlen(de->d_name);
			memcpy(c->name[c->n], de->d_name, len + 1);
			c->val[c->n++] = v;
		}
		fclose(f);
	}
	closedir(d);
}

long long hw_counter(const struct hw_counters *c, const char *name)
{
	for (int i = 0; i < c->n; i++)
		if (!strcmp(c->name[i], name))
			return c->val[i];
	return -1;
}
