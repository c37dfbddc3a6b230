/* SPDX-License-Identifier: Apache-2.0 */
/*
 * irq-wake: can a CPU thread sleep until a GPU kernel writes a word, with
 * no CPU polling at all, and how late does it wake?
 *
 * A kernel writes a sequence number into a word of host memory, then
 * spins until the CPU acknowledges it (another word), and records the
 * round trip with the GPU's clock; it waits GAP us between rounds, as a
 * trickle of requests would. The CPU side waits for each number in one of
 * four ways:
 *
 *   spin    reads the word in a loop (gsockd's spin; one hot core)
 *   poll    reads it every 20 us (nanosleep: the doorbell watch's shortest step)
 *   irq     cuStreamWaitValue32 on the word in a stream, an event recorded
 *           after it, cudaEventSynchronize on that event (cudaEventBlockingSync):
 *           the GPU's front end watches the word, the thread sleeps in the
 *           driver until the event's interrupt
 *   irq-p   irq from another process, its own CUDA context (as gsockd
 *           would be), the words in shared memory both register
 *
 * It prints the round trip's p50 / p99 / max and the waiting thread's CPU
 * time per round (getrusage; for irq-p the whole waiting process's, the
 * driver's threads too).
 *
 *   nvcc -O2 -o irq-wake bench/probes/irq-wake.cu -lcuda
 *   ./irq-wake [spin|poll|irq|irq-p] [ROUNDS] [GAP_US]
 */
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

struct words {
	volatile uint32_t seq; /* the GPU's: the round it is in */
	uint32_t pad[31];
	volatile uint32_t ack; /* the CPU's: the round it saw */
	uint32_t pad2[31];
};

#define CK(x)                                                                 \
	do {                                                                  \
		cudaError_t e_ = (x);                                         \
		if (e_ != cudaSuccess) {                                      \
			fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_)); \
			exit(1);                                              \
		}                                                             \
	} while (0)

__device__ static uint64_t now_ns(void)
{
	uint64_t t;

	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}

__global__ void pinger(struct words *w, uint32_t rounds, uint32_t gap_us,
		       uint64_t *rtt)
{
	if (threadIdx.x || blockIdx.x)
		return;
	for (uint32_t i = 1; i <= rounds; i++) {
		uint64_t t0 = now_ns(), t1;

		while (now_ns() - t0 < gap_us * 1000ull)
			__nanosleep(1000);
		t0 = now_ns();
		__threadfence_system();
		w->seq = i;
		__threadfence_system();
		while (w->ack != i)
			;
		t1 = now_ns();
		rtt[i - 1] = t1 - t0;
	}
}

static int cpu_who = RUSAGE_THREAD; /* the waiting process: all its threads */

static double cpu_us(void)
{
	struct rusage u;

	getrusage(cpu_who, &u);
	return u.ru_utime.tv_sec * 1e6 + u.ru_utime.tv_usec +
	       u.ru_stime.tv_sec * 1e6 + u.ru_stime.tv_usec;
}

/* The CPU side, in this process or another: acknowledge every round. */
static double waiter(const char *mode, struct words *w, uint32_t rounds)
{
	double c0 = cpu_us();

	if (!strcmp(mode, "spin")) {
		for (uint32_t i = 1; i <= rounds; i++) {
			while (w->seq != i)
				;
			w->ack = i;
		}
	} else if (!strcmp(mode, "poll")) {
		struct timespec ts = { 0, 20000 };

		for (uint32_t i = 1; i <= rounds; i++) {
			while (w->seq != i)
				nanosleep(&ts, NULL);
			w->ack = i;
		}
	} else { /* irq, irq-p */
		cudaStream_t st;
		cudaEvent_t ev;
		void *dp;

		CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
		CK(cudaEventCreateWithFlags(&ev, cudaEventBlockingSync |
							 cudaEventDisableTiming));
		CK(cudaHostGetDevicePointer(&dp, (void *)&w->seq, 0));
		c0 = cpu_us();
		for (uint32_t i = 1; i <= rounds; i++) {
			CUresult r = cuStreamWaitValue32((CUstream)st,
							 (CUdeviceptr)dp, i,
							 CU_STREAM_WAIT_VALUE_GEQ);

			if (r != CUDA_SUCCESS) {
				const char *s = "?";

				cuGetErrorString(r, &s);
				fprintf(stderr, "cuStreamWaitValue32: %s\n", s);
				exit(1);
			}
			CK(cudaEventRecord(ev, st));
			CK(cudaEventSynchronize(ev));
			w->ack = i;
		}
	}
	return (cpu_us() - c0) / rounds;
}

static int cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "irq";
	uint32_t rounds = argc > 2 ? (uint32_t)atoi(argv[2]) : 2000;
	uint32_t gap = argc > 3 ? (uint32_t)atoi(argv[3]) : 200;
	int other = !strcmp(mode, "irq-p");
	struct words *w = (struct words *)mmap(NULL, 4096, PROT_READ | PROT_WRITE,
					       MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	int fds[2];
	pid_t pid = -1;
	uint64_t *rtt, *drtt;
	double cpu = 0;
	char c;

	if (w == MAP_FAILED || pipe(fds))
		return 1;
	memset(w, 0, 4096);
	if (other) { /* the waiter first, before this process touches CUDA */
		pid = fork();
		if (pid == 0) {
			double per;

			cpu_who = RUSAGE_SELF; /* the driver's threads too */
			CK(cudaHostRegister(w, 4096, cudaHostRegisterMapped));
			if (write(fds[1], "r", 1) != 1)
				_exit(1);
			per = waiter("irq", w, rounds);
			if (write(fds[1], &per, sizeof(per)) != sizeof(per))
				_exit(1);
			_exit(0);
		}
		if (read(fds[0], &c, 1) != 1)
			return 1;
	}
	CK(cudaHostRegister(w, 4096, cudaHostRegisterMapped));
	CK(cudaMalloc(&drtt, rounds * sizeof(*drtt)));
	{
		struct words *dw;
		cudaStream_t st;

		CK(cudaHostGetDevicePointer((void **)&dw, w, 0));
		CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
		pinger<<<1, 32, 0, st>>>(dw, rounds, gap, drtt);
		CK(cudaGetLastError());
		if (!other)
			cpu = waiter(mode, w, rounds);
		CK(cudaStreamSynchronize(st));
	}
	if (other) {
		int status;

		if (read(fds[0], &cpu, sizeof(cpu)) != sizeof(cpu))
			return 1;
		waitpid(pid, &status, 0);
	}
	rtt = (uint64_t *)malloc(rounds * sizeof(*rtt));
	CK(cudaMemcpy(rtt, drtt, rounds * sizeof(*rtt), cudaMemcpyDeviceToHost));
	qsort(rtt, rounds, sizeof(*rtt), cmp);
	printf("irq-wake mode=%s rounds=%u gap_us=%u: rtt_us p50 %.1f p99 %.1f max %.1f; waiter cpu_us_per_round %.2f (%.3f cores over the rounds' gaps)\n",
	       mode, rounds, gap, rtt[rounds / 2] / 1e3, rtt[rounds * 99 / 100] / 1e3,
	       rtt[rounds - 1] / 1e3, cpu, cpu / (gap + rtt[rounds / 2] / 1e3));
	return 0;
}
