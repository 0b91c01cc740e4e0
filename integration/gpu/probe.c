/* graft's CUDA probe: proves that a container can run a kernel on the GPU graft gave it.
 *
 * It loads the driver's libcuda.so.1 by name (as every CUDA program does, through the
 * container's loader and ld.so.cache), JIT-compiles a hand-written PTX vector add, runs it
 * on N floats, checks every result on the host, and prints `PROBE PASS` (exit 0) or
 * `PROBE FAIL: <reason>` (exit 1). It needs no CUDA headers or toolkit: the few driver API
 * entry points it calls are declared below, by the symbol names libcuda exports (cuda.h
 * maps cuMemAlloc to cuMemAlloc_v2 and so on).
 *
 * With GRAFT_PROBE_HOLD_SECONDS=N it then prints `PROBE HOLDING N s` and waits that long
 * before it exits, CUDA still initialised (under MPS: still its server's client), for tests
 * that need two clients at once.
 *
 *   cc -O2 -o graft-cuda-probe integration/gpu/probe.c -ldl
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef void *CUcontext;
typedef void *CUmodule;
typedef void *CUfunction;
typedef void *CUstream;

/* The kernel: c[i] = a[i] + b[i] for i < n, one thread per element. The fake libcuda
 * (integration/fake-cuda) recognises it by this entry name. */
static const char PTX[] =
    ".version 7.0\n"
    ".target sm_50\n"
    ".address_size 64\n"
    "\n"
    ".visible .entry graft_vadd(\n"
    "    .param .u64 graft_vadd_a,\n"
    "    .param .u64 graft_vadd_b,\n"
    "    .param .u64 graft_vadd_c,\n"
    "    .param .u32 graft_vadd_n\n"
    ")\n"
    "{\n"
    "    .reg .pred %p<2>;\n"
    "    .reg .b32 %r<6>;\n"
    "    .reg .f32 %f<4>;\n"
    "    .reg .b64 %rd<11>;\n"
    "\n"
    "    ld.param.u64 %rd1, [graft_vadd_a];\n"
    "    ld.param.u64 %rd2, [graft_vadd_b];\n"
    "    ld.param.u64 %rd3, [graft_vadd_c];\n"
    "    ld.param.u32 %r1, [graft_vadd_n];\n"
    "    mov.u32 %r2, %ctaid.x;\n"
    "    mov.u32 %r3, %ntid.x;\n"
    "    mov.u32 %r4, %tid.x;\n"
    "    mad.lo.s32 %r5, %r2, %r3, %r4;\n"
    "    setp.ge.u32 %p1, %r5, %r1;\n"
    "    @%p1 bra DONE;\n"
    "    cvta.to.global.u64 %rd4, %rd1;\n"
    "    cvta.to.global.u64 %rd5, %rd2;\n"
    "    cvta.to.global.u64 %rd6, %rd3;\n"
    "    mul.wide.u32 %rd7, %r5, 4;\n"
    "    add.s64 %rd8, %rd4, %rd7;\n"
    "    add.s64 %rd9, %rd5, %rd7;\n"
    "    add.s64 %rd10, %rd6, %rd7;\n"
    "    ld.global.f32 %f1, [%rd8];\n"
    "    ld.global.f32 %f2, [%rd9];\n"
    "    add.rn.f32 %f3, %f1, %f2;\n"
    "    st.global.f32 [%rd10], %f3;\n"
    "DONE:\n"
    "    ret;\n"
    "}\n";

#define N (1u << 20)
#define BLOCK 256u

static struct {
    CUresult (*Init)(unsigned int);
    CUresult (*DriverGetVersion)(int *);
    CUresult (*DeviceGetCount)(int *);
    CUresult (*DeviceGet)(CUdevice *, int);
    CUresult (*DeviceGetName)(char *, int, CUdevice);
    CUresult (*DeviceTotalMem)(size_t *, CUdevice);
    CUresult (*CtxCreate)(CUcontext *, unsigned int, CUdevice);
    CUresult (*CtxDestroy)(CUcontext);
    CUresult (*ModuleLoadData)(CUmodule *, const void *);
    CUresult (*ModuleGetFunction)(CUfunction *, CUmodule, const char *);
    CUresult (*MemAlloc)(CUdeviceptr *, size_t);
    CUresult (*MemFree)(CUdeviceptr);
    CUresult (*MemcpyHtoD)(CUdeviceptr, const void *, size_t);
    CUresult (*MemcpyDtoH)(void *, CUdeviceptr, size_t);
    CUresult (*LaunchKernel)(CUfunction, unsigned int, unsigned int, unsigned int,
                             unsigned int, unsigned int, unsigned int, unsigned int,
                             CUstream, void **, void **);
    CUresult (*CtxSynchronize)(void);
    CUresult (*GetErrorString)(CUresult, const char **);
    CUresult (*GetErrorName)(CUresult, const char **);
} cu;

static int fail(const char *what, const char *detail) {
    printf("PROBE FAIL: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
    return 1;
}

/* Fails with the call's name and the driver's own name and description of the error. */
static int cu_fail(const char *call, CUresult rc) {
    const char *name = NULL, *text = NULL;
    char buf[512];
    if (cu.GetErrorName) cu.GetErrorName(rc, &name);
    if (cu.GetErrorString) cu.GetErrorString(rc, &text);
    snprintf(buf, sizeof buf, "error %d %s (%s)", rc, name ? name : "?", text ? text : "?");
    return fail(call, buf);
}

#define CHECK(call, expr)                        \
    do {                                         \
        CUresult rc_ = (expr);                   \
        if (rc_ != 0) return cu_fail(call, rc_); \
    } while (0)

static int load(void) {
    /* By name, RTLD_NOW: what the CUDA runtime does, so a library the container's loader
     * cannot find or resolve fails here. */
    void *lib = dlopen("libcuda.so.1", RTLD_NOW);
    if (!lib) return fail("dlopen libcuda.so.1", dlerror());
    struct { const char *sym; void **slot; } syms[] = {
        {"cuInit", (void **)&cu.Init},
        {"cuDriverGetVersion", (void **)&cu.DriverGetVersion},
        {"cuDeviceGetCount", (void **)&cu.DeviceGetCount},
        {"cuDeviceGet", (void **)&cu.DeviceGet},
        {"cuDeviceGetName", (void **)&cu.DeviceGetName},
        {"cuDeviceTotalMem_v2", (void **)&cu.DeviceTotalMem},
        {"cuCtxCreate_v2", (void **)&cu.CtxCreate},
        {"cuCtxDestroy_v2", (void **)&cu.CtxDestroy},
        {"cuModuleLoadData", (void **)&cu.ModuleLoadData},
        {"cuModuleGetFunction", (void **)&cu.ModuleGetFunction},
        {"cuMemAlloc_v2", (void **)&cu.MemAlloc},
        {"cuMemFree_v2", (void **)&cu.MemFree},
        {"cuMemcpyHtoD_v2", (void **)&cu.MemcpyHtoD},
        {"cuMemcpyDtoH_v2", (void **)&cu.MemcpyDtoH},
        {"cuLaunchKernel", (void **)&cu.LaunchKernel},
        {"cuCtxSynchronize", (void **)&cu.CtxSynchronize},
        {"cuGetErrorString", (void **)&cu.GetErrorString},
        {"cuGetErrorName", (void **)&cu.GetErrorName},
    };
    for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
        *syms[i].slot = dlsym(lib, syms[i].sym);
        if (!*syms[i].slot) return fail("libcuda.so.1 lacks", syms[i].sym);
    }
    return 0;
}

/* Runs the kernel on device 0 and checks every element. */
static int vadd(CUdevice dev, const char *name) {
    CUcontext ctx;
    CUmodule mod;
    CUfunction fn;
    CUdeviceptr da, db, dc;
    size_t bytes = (size_t)N * sizeof(float);
    float *a = malloc(bytes), *b = malloc(bytes), *c = malloc(bytes);
    if (!a || !b || !c) return fail("malloc", NULL);
    /* Integers below 2^24 add exactly in float, so the check can demand equality. */
    for (unsigned i = 0; i < N; i++) {
        a[i] = (float)i;
        b[i] = (float)(2u * (N - i));
        c[i] = -1.0f;
    }
    CHECK("cuCtxCreate", cu.CtxCreate(&ctx, 0, dev));
    CHECK("cuModuleLoadData (PTX JIT)", cu.ModuleLoadData(&mod, PTX));
    CHECK("cuModuleGetFunction graft_vadd", cu.ModuleGetFunction(&fn, mod, "graft_vadd"));
    CHECK("cuMemAlloc", cu.MemAlloc(&da, bytes));
    CHECK("cuMemAlloc", cu.MemAlloc(&db, bytes));
    CHECK("cuMemAlloc", cu.MemAlloc(&dc, bytes));
    CHECK("cuMemcpyHtoD", cu.MemcpyHtoD(da, a, bytes));
    CHECK("cuMemcpyHtoD", cu.MemcpyHtoD(db, b, bytes));
    unsigned int n = N;
    void *args[] = {&da, &db, &dc, &n};
    CHECK("cuLaunchKernel",
          cu.LaunchKernel(fn, (N + BLOCK - 1) / BLOCK, 1, 1, BLOCK, 1, 1, 0, NULL, args, NULL));
    CHECK("cuCtxSynchronize", cu.CtxSynchronize());
    CHECK("cuMemcpyDtoH", cu.MemcpyDtoH(c, dc, bytes));
    for (unsigned i = 0; i < N; i++) {
        if (c[i] != a[i] + b[i]) {
            char buf[128];
            snprintf(buf, sizeof buf, "c[%u] = %g, want %g", i, c[i], a[i] + b[i]);
            return fail("wrong result", buf);
        }
    }
    CHECK("cuMemFree", cu.MemFree(da));
    CHECK("cuMemFree", cu.MemFree(db));
    CHECK("cuMemFree", cu.MemFree(dc));
    CHECK("cuCtxDestroy", cu.CtxDestroy(ctx));
    free(a);
    free(b);
    free(c);
    printf("PROBE PASS: vector add of %u floats on %s\n", N, name);
    return 0;
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (load()) return 1;
    int version = 0, count = 0;
    CHECK("cuDriverGetVersion", cu.DriverGetVersion(&version));
    printf("CUDA driver version: %d.%d\n", version / 1000, (version % 1000) / 10);
    CHECK("cuInit", cu.Init(0));
    CHECK("cuDeviceGetCount", cu.DeviceGetCount(&count));
    printf("CUDA devices: %d\n", count);
    if (count < 1) return fail("no CUDA device", NULL);
    CUdevice dev;
    char name[256];
    size_t mem = 0;
    CHECK("cuDeviceGet", cu.DeviceGet(&dev, 0));
    CHECK("cuDeviceGetName", cu.DeviceGetName(name, sizeof name, dev));
    CHECK("cuDeviceTotalMem", cu.DeviceTotalMem(&mem, dev));
    printf("device 0: %s, %zu MiB\n", name, mem >> 20);
    int rc = vadd(dev, name);
    const char *hold = getenv("GRAFT_PROBE_HOLD_SECONDS");
    if (rc == 0 && hold && atoi(hold) > 0) {
        printf("PROBE HOLDING %d s\n", atoi(hold));
        sleep((unsigned)atoi(hold));
    }
    return rc;
}
