/* The fake MPS control daemon's MPS v3 commands (included by mps-commands.h), for a daemon
 * started with `-p 3`. Source: NVIDIA's MPS guide of release 615 and later, pages "MPS v3
 * Interface" and "Common Tasks" (docs.nvidia.com/deploy/mps): commands take the form
 * `<module> <verb> [args] [--key=value ...]` (`key=value` also), names are lowercase letters,
 * digits and underscores up to 64 characters, each connecting UID is served by a server
 * `uid_<uid>`, and several servers run at once.
 *
 * Modelled: `server list [NAME] [--format=table|csv[,noheader]]` (columns name, uid, pid,
 * status, pipe-directory, allowed-devices, context-ids; the guide's csv example shows
 * `Ready`), `server create --uid=N` (the server `uid_N`), `server set NAME
 * [--active-thread-percentage=1..100] [--pinned-memory-limit=N(K|M|G)]` (at least one;
 * applied to the server's default namespace, here: its later clients, on its one device),
 * `server get NAME FIELD` (name, uid, pid, status, pipe-directory, allowed-devices) and
 * `server delete NAME [--force]` (refused while clients remain, unless forced). Named
 * servers other than `uid_<uid>`, namespaces and the other modules are not modelled: they
 * answer an error. The guide names no exit status and no error text: the fake's errors
 * begin with `Error:` and its client exits 1 on them (graft-mps treats either as a
 * failure). A server starts with no limit (the guide names no default for servers made
 * later; graft sets each one's). */

#define V3_MAX_ARGS 8

/* `--key=value`, `key=value` or a bare word, split into key and value (value NULL for a
 * bare word or flag). */
static void v3_split(char *arg, char **key, char **value) {
    while (*arg == '-') arg++;
    *key = arg;
    char *eq = strchr(arg, '=');
    *value = NULL;
    if (eq) {
        *eq = '\0';
        *value = eq + 1;
    }
}

static struct server *v3_server(const char *name) {
    for (int i = 0; i < MAX_SERVERS; i++) {
        char own[32];
        snprintf(own, sizeof own, "uid_%u", (unsigned)servers[i].uid);
        if (servers[i].pid && strcmp(own, name) == 0) return &servers[i];
    }
    return NULL;
}

static const char *v3_status(const struct server *s) {
    return s->ready ? "Ready" : (s->draining ? "Stopping" : "Starting");
}

static void v3_row(int fd, const struct server *s, int csv) {
    const char *visible = getenv("CUDA_VISIBLE_DEVICES");
    reply(fd, csv ? "uid_%u,%u,%ld,%s,%s/uid_%u,%s,-" : "uid_%u  %u  %ld  %s  %s/uid_%u  %s  -",
          (unsigned)s->uid, (unsigned)s->uid, (long)s->pid, v3_status(s), pipe_dir,
          (unsigned)s->uid, visible && *visible ? visible : "all");
}

/* A limit as `server set` takes it: N followed by K, M or G; in MiB, -1 when malformed. */
static long long v3_mem(const char *s) {
    size_t n = strlen(s);
    if (n > 1 && s[n - 1] == 'K') {
        char *end;
        long long k = strtoll(s, &end, 10);
        return (end == s + n - 1 && k >= 0 && k % 1024 == 0) ? k / 1024 : -1;
    }
    return parse_mem(s);
}

static void v3_list(int fd, int argc, char **argv) {
    const char *only = NULL;
    int csv = 0, header = 1;
    for (int i = 2; i < argc; i++) {
        char *k, *v;
        v3_split(argv[i], &k, &v);
        if (strcmp(k, "format") == 0 && v) {
            csv = strncmp(v, "csv", 3) == 0;
            header = strstr(v, "noheader") == NULL;
        } else if (!v && argv[i][0] != '-') {
            only = argv[i];
        } else {
            reply(fd, "Error: unknown option %s", argv[i]);
            return;
        }
    }
    if (header)
        reply(fd, csv ? "name,uid,pid,status,pipe-directory,allowed-devices,context-ids"
                      : "name  uid  pid  status  pipe-directory  allowed-devices  context-ids");
    for (int i = 0; i < MAX_SERVERS; i++) {
        if (!servers[i].pid) continue;
        char own[32];
        snprintf(own, sizeof own, "uid_%u", (unsigned)servers[i].uid);
        if (!only || strcmp(only, own) == 0) v3_row(fd, &servers[i], csv);
    }
}

static void v3_set(int fd, int argc, char **argv) {
    struct server *s = argc > 2 ? v3_server(argv[2]) : NULL;
    if (!s) {
        reply(fd, "Error: server %s not found", argc > 2 ? argv[2] : "");
        return;
    }
    double atp = -1;
    long long mem = -1;
    int options = 0;
    for (int i = 3; i < argc; i++) {
        char *k, *v;
        v3_split(argv[i], &k, &v);
        options++;
        if (strcmp(k, "active-thread-percentage") == 0 && v && parse_atp(v, &atp) == 0) continue;
        if (strcmp(k, "pinned-memory-limit") == 0 && v && (mem = v3_mem(v)) >= 0) continue;
        reply(fd, "Error: invalid option %s", argv[i]);
        return;
    }
    if (!options) {
        reply(fd, "Error: server set needs at least one option");
        return;
    }
    if (atp > 0) s->atp = atp, tell_server(s, "atp %g\n", atp);
    if (mem >= 0) s->mem[0] = mem, tell_server(s, "mem 0 %lld\n", mem);
}

static void v3_get(int fd, int argc, char **argv) {
    struct server *s = argc == 4 ? v3_server(argv[2]) : NULL;
    if (!s) {
        reply(fd, "Error: server %s not found", argc > 2 ? argv[2] : "");
        return;
    }
    const char *f = argv[3];
    const char *visible = getenv("CUDA_VISIBLE_DEVICES");
    if (strcmp(f, "name") == 0) reply(fd, "uid_%u", (unsigned)s->uid);
    else if (strcmp(f, "uid") == 0) reply(fd, "%u", (unsigned)s->uid);
    else if (strcmp(f, "pid") == 0) reply(fd, "%ld", (long)s->pid);
    else if (strcmp(f, "status") == 0) reply(fd, "%s", v3_status(s));
    else if (strcmp(f, "pipe-directory") == 0) reply(fd, "%s/uid_%u", pipe_dir, (unsigned)s->uid);
    else if (strcmp(f, "allowed-devices") == 0) reply(fd, "%s", visible && *visible ? visible : "all");
    else reply(fd, "Error: unknown field %s", f);
}

static void v3_create(int fd, int argc, char **argv) {
    long uid = -1;
    for (int i = 2; i < argc; i++) {
        char *k, *v, *end;
        v3_split(argv[i], &k, &v);
        if (strcmp(k, "uid") == 0 && v) {
            uid = strtol(v, &end, 10);
            if (*end || end == v || uid < 0) uid = -1;
        } else {
            reply(fd, "Error: named servers other than uid_<uid> are not modelled: %s", argv[i]);
            return;
        }
    }
    if (uid < 0)
        reply(fd, "Error: server create needs --uid=<uid>");
    else if (server_of_uid((uid_t)uid))
        reply(fd, "Error: server uid_%ld exists", uid);
    else
        spawn_server((uid_t)uid, (gid_t)uid);
}

static void v3_delete(int fd, int argc, char **argv) {
    struct server *s = argc > 2 ? v3_server(argv[2]) : NULL;
    int force = argc > 3 && strcmp(argv[3], "--force") == 0;
    if (!s)
        reply(fd, "Error: server %s not found", argc > 2 ? argv[2] : "");
    else if (s->nclients > 0 && !force)
        reply(fd, "Error: server %s has %d active clients", argv[2], s->nclients);
    else
        s->draining = 1, tell_server(s, "exit\n");
}

/* Answers one v3 command line. */
static int handle_v3(int fd, const char *line) {
    char buf[MAX_LINE];
    snprintf(buf, sizeof buf, "%s", line);
    char *argv[V3_MAX_ARGS];
    int argc = 0;
    for (char *s = buf, *t; argc < V3_MAX_ARGS && (t = strtok_r(s, " \t", &s));) argv[argc++] = t;
    if (argc < 2 || strcmp(argv[0], "server") != 0) {
        reply(fd, "Error: unknown or unmodelled command: %s", line);
        return 0;
    }
    const char *verb = argv[1];
    if (strcmp(verb, "list") == 0) v3_list(fd, argc, argv);
    else if (strcmp(verb, "set") == 0) v3_set(fd, argc, argv);
    else if (strcmp(verb, "get") == 0) v3_get(fd, argc, argv);
    else if (strcmp(verb, "create") == 0) v3_create(fd, argc, argv);
    else if (strcmp(verb, "delete") == 0) v3_delete(fd, argc, argv);
    else reply(fd, "Error: unknown verb server %s", verb);
    return 0;
}
