/* The fake MPS control daemon's commands (included by mps-daemon.h; the list and their
 * meaning are in nvidia-cuda-mps-control.c's header, after the MPS guide's "Appendix:
 * Tools and Interface Reference"). Every command is logged before it runs. */

static void reply(int fd, const char *fmt, ...) {
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(msg, sizeof msg - 1, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if (n > (int)sizeof msg - 2) n = (int)sizeof msg - 2;
    msg[n++] = '\n';
    write_all(fd, msg, (size_t)n);
}

/* A percentage the commands accept: above 0, at most 100. */
static int parse_atp(const char *s, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v > 0.0 && v <= 100.0)) return -1;
    *out = v;
    return 0;
}

static int parse_dev(const char *s) {
    char *end;
    long d = strtol(s, &end, 10);
    return (end == s || *end || d < 0 || d >= MAX_DEVS) ? -1 : (int)d;
}

#include "mps-v3.h"

/* The running server whose pid `s` names, or NULL. */
static struct server *server_pid(const char *s) {
    char *end;
    long pid = strtol(s, &end, 10);
    if (*end || end == s) return NULL;
    for (int i = 0; i < MAX_SERVERS; i++)
        if (servers[i].pid && pid == (long)servers[i].pid) return &servers[i];
    return NULL;
}

/* Answers one command; returns 1 when it was quit (the connection is then still open). */
static int handle(int fd, const char *line) {
    const char *p = line;
    while (*p == ' ' || *p == '\t') p++;
    if (!*p) return 0;
    logc("Command %s", p);
    char cmd[64] = "", a[64] = "", b[64] = "", c[64] = "", extra[8] = "";
    int n = sscanf(p, "%63s %63s %63s %63s %7s", cmd, a, b, c, extra);
    double v;
    long long m;
    int d;
    struct server *srv = n >= 2 ? server_pid(a) : NULL;

    if (strcmp(cmd, "quit") == 0 && n == 1) return 1;
    /* An MPS v3 daemon takes the v3 commands (mps-v3.h); the legacy ones are not
     * documented for it, so the fake refuses them. */
    if (protocol == 3) return handle_v3(fd, p);
    struct server *only = running();
    if (strcmp(cmd, "get_server_list") == 0 && n == 1) {
        if (only && only->ready) reply(fd, "%ld", (long)only->pid);
    } else if (strcmp(cmd, "get_server_status") == 0 && n == 2) {
        if (srv)
            reply(fd, "%s", srv->ready ? "ACTIVE" : "INIT");
        else
            reply(fd, "Server %s not found", a);
    } else if (strcmp(cmd, "get_client_list") == 0 && n == 2) {
        if (!srv) {
            reply(fd, "Server %s not found", a);
        } else {
            char list[sizeof srv->clients];
            snprintf(list, sizeof list, "%s", srv->clients);
            for (char *s = list, *t; (t = strtok_r(s, " ", &s));) reply(fd, "%s", t);
        }
    } else if (strcmp(cmd, "start_server") == 0 && n == 3 && strcmp(a, "-uid") == 0) {
        char *end;
        long uid = strtol(b, &end, 10);
        if (*end || end == b || uid < 0)
            reply(fd, "Invalid user id %s", b);
        else if (only && only->uid != (uid_t)uid)
            reply(fd, "A server of another user is running");
        else if (!only)
            spawn_server((uid_t)uid, (gid_t)uid);
    } else if (strcmp(cmd, "terminate_client") == 0 && n == 3) {
        if (srv)
            tell_server(srv, "terminate %s\n", b);
        else
            reply(fd, "Server %s not found", a);
    } else if (strcmp(cmd, "set_default_active_thread_percentage") == 0 && n == 2) {
        if (parse_atp(a, &v) != 0)
            reply(fd, "Invalid active thread percentage");
        else
            def_atp = v, reply(fd, "%s", a);
    } else if (strcmp(cmd, "get_default_active_thread_percentage") == 0 && n == 1) {
        reply(fd, "%.1f", def_atp);
    } else if (strcmp(cmd, "set_active_thread_percentage") == 0 && n == 3) {
        if (!srv)
            reply(fd, "Server %s not found", a);
        else if (parse_atp(b, &v) != 0)
            reply(fd, "Invalid active thread percentage");
        else
            srv->atp = v, tell_server(srv, "atp %g\n", v), reply(fd, "%s", b);
    } else if (strcmp(cmd, "get_active_thread_percentage") == 0 && n == 2) {
        if (srv)
            reply(fd, "%.1f", srv->atp);
        else
            reply(fd, "Server %s not found", a);
    } else if (strcmp(cmd, "set_default_device_pinned_mem_limit") == 0 && n == 3) {
        if ((d = parse_dev(a)) < 0 || (m = parse_mem(b)) < 0)
            reply(fd, "Invalid device or limit");
        else
            def_mem[d] = m, reply(fd, "%s", b);
    } else if (strcmp(cmd, "get_default_device_pinned_mem_limit") == 0 && n == 2) {
        if ((d = parse_dev(a)) < 0)
            reply(fd, "Invalid device");
        else if (def_mem[d] < 0)
            reply(fd, "No limit");
        else
            reply(fd, "%lldM", def_mem[d]);
    } else if (strcmp(cmd, "set_device_pinned_mem_limit") == 0 && n == 4) {
        if (!srv)
            reply(fd, "Server %s not found", a);
        else if ((d = parse_dev(b)) < 0 || (m = parse_mem(c)) < 0)
            reply(fd, "Invalid device or limit");
        else
            srv->mem[d] = m, tell_server(srv, "mem %d %lld\n", d, m), reply(fd, "%s", c);
    } else if (strcmp(cmd, "get_device_pinned_mem_limit") == 0 && n == 3) {
        if (!srv)
            reply(fd, "Server %s not found", a);
        else if ((d = parse_dev(b)) < 0)
            reply(fd, "Invalid device");
        else if (srv->mem[d] < 0)
            reply(fd, "No limit");
        else
            reply(fd, "%lldM", srv->mem[d]);
    } else {
        reply(fd, "Unknown command");
    }
    return 0;
}
