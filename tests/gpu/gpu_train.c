/* A small CNN trained on synthetic data with cuDNN and cuBLAS, every activation, gradient and
 * workspace a cudaMalloc of its own, freed when no longer needed, as in a framework: the GPU
 * workload of tools/gpu_check.sh (needs a GPU; not a ctest). */
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* A failed CUDA, cuDNN or cuBLAS call leaves nothing to train with: say which, and stop. */
#define CUDA_OK(call) check_cuda((call), #call, __LINE__)
#define CUDNN_OK(call) check_cudnn((call), #call, __LINE__)
#define CUBLAS_OK(call) check_cublas((call), #call, __LINE__)

#define CLASSES 10
#define CHANNELS 3
#define SIDE 32
#define C1 16 /* conv1: 3x3, stride 1, same padding */
#define C2 32 /* conv2: 3x3, stride 2 */
#define DATASET_BATCHES 8
#define LEARNING_RATE 0.05f

static void check_cuda(cudaError_t rc, const char *what, int line)
{
    if (rc != cudaSuccess) {
        fprintf(stderr, "gpu_train:%d: %s: %s\n", line, what, cudaGetErrorString(rc));
        exit(1);
    }
}

static void check_cudnn(cudnnStatus_t rc, const char *what, int line)
{
    if (rc != CUDNN_STATUS_SUCCESS) {
        fprintf(stderr, "gpu_train:%d: %s: %s\n", line, what, cudnnGetErrorString(rc));
        exit(1);
    }
}

static void check_cublas(cublasStatus_t rc, const char *what, int line)
{
    if (rc != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "gpu_train:%d: %s: %s\n", line, what, cublasGetStatusString(rc));
        exit(1);
    }
}

/* ---- device memory: every buffer its own cudaMalloc, and the peak of what is in use ---- */

static size_t mem_total, mem_peak_used;

static void sample_memory(void)
{
    size_t free_bytes, total;
    CUDA_OK(cudaMemGetInfo(&free_bytes, &total));
    mem_total = total;
    if (total - free_bytes > mem_peak_used)
        mem_peak_used = total - free_bytes;
}

static float *dev_alloc(size_t floats)
{
    void *p = NULL;
    CUDA_OK(cudaMalloc(&p, floats * sizeof(float)));
    sample_memory();
    return p;
}

static void *workspace_alloc(size_t bytes)
{
    void *p = NULL;
    if (bytes) {
        CUDA_OK(cudaMalloc(&p, bytes));
        sample_memory();
    }
    return p;
}

static void dev_free(void *p)
{
    if (p)
        CUDA_OK(cudaFree(p));
}

/* ---- synthetic data: one random template per class, plus noise; fixed seed ---- */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static float uniform(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((rng_state >> 40) * (1.0 / 16777216.0));
}

static float gaussian(void)
{
    float u = uniform() + 1e-7f, v = uniform();
    return sqrtf(-2.0f * logf(u)) * cosf(6.2831853f * v);
}

struct dataset {
    float *images; /* DATASET_BATCHES * batch images, NCHW */
    int *labels;
};

static int make_dataset(struct dataset *ds, int batch)
{
    size_t image = (size_t)CHANNELS * SIDE * SIDE;
    size_t count = (size_t)DATASET_BATCHES * (size_t)batch;
    float *templates = malloc(CLASSES * image * sizeof(float));
    ds->images = malloc(count * image * sizeof(float));
    ds->labels = malloc(count * sizeof(int));
    if (!templates || !ds->images || !ds->labels) {
        free(templates);
        free(ds->images);
        free(ds->labels);
        return -1;
    }
    for (size_t i = 0; i < CLASSES * image; i++)
        templates[i] = gaussian();
    for (size_t n = 0; n < count; n++) {
        int label = (int)(uniform() * CLASSES) % CLASSES;
        ds->labels[n] = label;
        for (size_t i = 0; i < image; i++)
            ds->images[n * image + i] = templates[(size_t)label * image + i] + 1.5f * gaussian();
    }
    free(templates);
    return 0;
}

/* ---- layers ---- */

struct conv {
    int cin, cout, stride, hin, hout;
    cudnnTensorDescriptor_t x_desc, y_desc;
    cudnnFilterDescriptor_t w_desc;
    cudnnConvolutionDescriptor_t conv_desc;
    cudnnConvolutionFwdAlgo_t fwd_algo;
    cudnnConvolutionBwdDataAlgo_t bwd_data_algo;
    cudnnConvolutionBwdFilterAlgo_t bwd_filter_algo;
    size_t fwd_ws, bwd_data_ws, bwd_filter_ws;
    float *w;
    size_t w_count;
};

static void upload_random(float *dev, size_t count, float scale)
{
    float *host = malloc(count * sizeof(float));
    if (!host) {
        fprintf(stderr, "gpu_train: out of host memory\n");
        exit(1);
    }
    for (size_t i = 0; i < count; i++)
        host[i] = scale * gaussian();
    CUDA_OK(cudaMemcpy(dev, host, count * sizeof(float), cudaMemcpyHostToDevice));
    free(host);
}

/* Deterministic algorithms only, in plain FP32: the losses of two runs must compare. */
static void conv_setup(cudnnHandle_t dnn, struct conv *l, int batch, int cin, int cout, int hin,
                       int stride)
{
    l->cin = cin;
    l->cout = cout;
    l->hin = hin;
    l->stride = stride;
    l->hout = (hin + 2 - 3) / stride + 1;
    CUDNN_OK(cudnnCreateTensorDescriptor(&l->x_desc));
    CUDNN_OK(cudnnCreateTensorDescriptor(&l->y_desc));
    CUDNN_OK(cudnnCreateFilterDescriptor(&l->w_desc));
    CUDNN_OK(cudnnCreateConvolutionDescriptor(&l->conv_desc));
    CUDNN_OK(cudnnSetTensor4dDescriptor(l->x_desc, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, batch, cin,
                                        hin, hin));
    CUDNN_OK(cudnnSetFilter4dDescriptor(l->w_desc, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, cout, cin,
                                        3, 3));
    CUDNN_OK(cudnnSetConvolution2dDescriptor(l->conv_desc, 1, 1, stride, stride, 1, 1,
                                             CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    CUDNN_OK(cudnnSetConvolutionMathType(l->conv_desc, CUDNN_FMA_MATH));
    int n, c, h, w;
    CUDNN_OK(
        cudnnGetConvolution2dForwardOutputDim(l->conv_desc, l->x_desc, l->w_desc, &n, &c, &h, &w));
    if (n != batch || c != cout || h != l->hout || w != l->hout) {
        fprintf(stderr, "gpu_train: unexpected conv output %dx%dx%dx%d\n", n, c, h, w);
        exit(1);
    }
    CUDNN_OK(cudnnSetTensor4dDescriptor(l->y_desc, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, batch, cout,
                                        h, w));

    int found = 0, k;
    cudnnConvolutionFwdAlgoPerf_t fwd[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    CUDNN_OK(cudnnGetConvolutionForwardAlgorithm_v7(dnn, l->x_desc, l->w_desc, l->conv_desc,
                                                    l->y_desc, CUDNN_CONVOLUTION_FWD_ALGO_COUNT,
                                                    &found, fwd));
    for (k = 0; k < found; k++)
        if (fwd[k].status == CUDNN_STATUS_SUCCESS && fwd[k].determinism == CUDNN_DETERMINISTIC)
            break;
    if (k == found)
        goto no_algo;
    l->fwd_algo = fwd[k].algo;
    CUDNN_OK(cudnnGetConvolutionForwardWorkspaceSize(dnn, l->x_desc, l->w_desc, l->conv_desc,
                                                     l->y_desc, l->fwd_algo, &l->fwd_ws));

    cudnnConvolutionBwdDataAlgoPerf_t bwd_data[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    CUDNN_OK(cudnnGetConvolutionBackwardDataAlgorithm_v7(
        dnn, l->w_desc, l->y_desc, l->conv_desc, l->x_desc, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT,
        &found, bwd_data));
    for (k = 0; k < found; k++)
        if (bwd_data[k].status == CUDNN_STATUS_SUCCESS &&
            bwd_data[k].determinism == CUDNN_DETERMINISTIC)
            break;
    if (k == found)
        goto no_algo;
    l->bwd_data_algo = bwd_data[k].algo;
    CUDNN_OK(cudnnGetConvolutionBackwardDataWorkspaceSize(
        dnn, l->w_desc, l->y_desc, l->conv_desc, l->x_desc, l->bwd_data_algo, &l->bwd_data_ws));

    cudnnConvolutionBwdFilterAlgoPerf_t bwd_filter[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    CUDNN_OK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
        dnn, l->x_desc, l->y_desc, l->conv_desc, l->w_desc, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT,
        &found, bwd_filter));
    for (k = 0; k < found; k++)
        if (bwd_filter[k].status == CUDNN_STATUS_SUCCESS &&
            bwd_filter[k].determinism == CUDNN_DETERMINISTIC)
            break;
    if (k == found)
        goto no_algo;
    l->bwd_filter_algo = bwd_filter[k].algo;
    CUDNN_OK(cudnnGetConvolutionBackwardFilterWorkspaceSize(
        dnn, l->x_desc, l->y_desc, l->conv_desc, l->w_desc, l->bwd_filter_algo, &l->bwd_filter_ws));

    l->w_count = (size_t)cout * (size_t)cin * 9;
    l->w = dev_alloc(l->w_count);
    upload_random(l->w, l->w_count, sqrtf(2.0f / (float)(cin * 9)));
    return;
no_algo:
    fprintf(stderr, "gpu_train: no deterministic cuDNN algorithm for a %d->%d convolution\n", cin,
            cout);
    exit(1);
}

static void conv_teardown(struct conv *l)
{
    dev_free(l->w);
    cudnnDestroyConvolutionDescriptor(l->conv_desc);
    cudnnDestroyFilterDescriptor(l->w_desc);
    cudnnDestroyTensorDescriptor(l->y_desc);
    cudnnDestroyTensorDescriptor(l->x_desc);
}

static void conv_forward(cudnnHandle_t dnn, const struct conv *l, const float *x, float *y)
{
    const float one = 1.0f, zero = 0.0f;
    void *ws = workspace_alloc(l->fwd_ws);
    CUDNN_OK(cudnnConvolutionForward(dnn, &one, l->x_desc, x, l->w_desc, l->w, l->conv_desc,
                                     l->fwd_algo, ws, l->fwd_ws, &zero, l->y_desc, y));
    dev_free(ws);
}

static void conv_backward_filter(cudnnHandle_t dnn, const struct conv *l, const float *x,
                                 const float *dy, float *dw)
{
    const float one = 1.0f, zero = 0.0f;
    void *ws = workspace_alloc(l->bwd_filter_ws);
    CUDNN_OK(cudnnConvolutionBackwardFilter(dnn, &one, l->x_desc, x, l->y_desc, dy, l->conv_desc,
                                            l->bwd_filter_algo, ws, l->bwd_filter_ws, &zero,
                                            l->w_desc, dw));
    dev_free(ws);
}

static void conv_backward_data(cudnnHandle_t dnn, const struct conv *l, const float *dy, float *dx)
{
    const float one = 1.0f, zero = 0.0f;
    void *ws = workspace_alloc(l->bwd_data_ws);
    CUDNN_OK(cudnnConvolutionBackwardData(dnn, &one, l->w_desc, l->w, l->y_desc, dy, l->conv_desc,
                                          l->bwd_data_algo, ws, l->bwd_data_ws, &zero, l->x_desc,
                                          dx));
    dev_free(ws);
}

struct net {
    cudnnHandle_t dnn;
    cublasHandle_t blas;
    cudnnActivationDescriptor_t relu;
    cudnnTensorDescriptor_t logits_desc;
    struct conv conv1, conv2;
    float *fc; /* CLASSES x features, row-major */
    int batch, features;
};

static void relu_forward(struct net *m, cudnnTensorDescriptor_t d, const float *x, float *y)
{
    const float one = 1.0f, zero = 0.0f;
    CUDNN_OK(cudnnActivationForward(m->dnn, m->relu, &one, d, x, &zero, d, y));
}

static void relu_backward(struct net *m, cudnnTensorDescriptor_t d, const float *y, const float *dy,
                          const float *x, float *dx)
{
    const float one = 1.0f, zero = 0.0f;
    CUDNN_OK(cudnnActivationBackward(m->dnn, m->relu, &one, d, y, d, dy, d, x, &zero, d, dx));
}

static void sgd(struct net *m, float *w, float *dw, size_t count)
{
    const float step = -LEARNING_RATE;
    CUBLAS_OK(cublasSaxpy(m->blas, (int)count, &step, dw, 1, w, 1));
}

/* One forward and backward pass with an SGD step; returns the mean cross-entropy. The
 * allocation order and lifetimes are those of a framework's autograd: activations live until
 * their gradient is computed, each gradient until the optimizer step. */
static double train_step(struct net *m, const float *images, const int *labels, float *probs_h)
{
    const float one = 1.0f, zero = 0.0f;
    const struct conv *c1 = &m->conv1, *c2 = &m->conv2;
    int b = m->batch, k = m->features;
    size_t in = (size_t)b * CHANNELS * SIDE * SIDE;
    size_t n1 = (size_t)b * C1 * (size_t)c1->hout * (size_t)c1->hout;
    size_t n2 = (size_t)b * (size_t)k;
    size_t nl = (size_t)b * CLASSES;

    float *x = dev_alloc(in);
    CUDA_OK(cudaMemcpy(x, images, in * sizeof(float), cudaMemcpyHostToDevice));
    float *z1 = dev_alloc(n1);
    conv_forward(m->dnn, c1, x, z1);
    float *a1 = dev_alloc(n1);
    relu_forward(m, c1->y_desc, z1, a1);
    float *z2 = dev_alloc(n2);
    conv_forward(m->dnn, c2, a1, z2);
    float *a2 = dev_alloc(n2);
    relu_forward(m, c2->y_desc, z2, a2);
    float *logits = dev_alloc(nl);
    CUBLAS_OK(cublasSgemm(m->blas, CUBLAS_OP_T, CUBLAS_OP_N, CLASSES, b, k, &one, m->fc, k, a2, k,
                          &zero, logits, CLASSES));
    float *probs = dev_alloc(nl);
    CUDNN_OK(cudnnSoftmaxForward(m->dnn, CUDNN_SOFTMAX_ACCURATE, CUDNN_SOFTMAX_MODE_INSTANCE, &one,
                                 m->logits_desc, logits, &zero, m->logits_desc, probs));
    dev_free(logits);

    /* Cross-entropy and its gradient (p - onehot) / batch on the host: 10 values a sample. */
    CUDA_OK(cudaMemcpy(probs_h, probs, nl * sizeof(float), cudaMemcpyDeviceToHost));
    dev_free(probs);
    double loss = 0;
    for (int i = 0; i < b; i++) {
        loss -= log((double)probs_h[i * CLASSES + labels[i]] + 1e-12);
        for (int c = 0; c < CLASSES; c++)
            probs_h[i * CLASSES + c] =
                (probs_h[i * CLASSES + c] - (c == labels[i] ? 1.0f : 0.0f)) / (float)b;
    }
    float *dlogits = dev_alloc(nl);
    CUDA_OK(cudaMemcpy(dlogits, probs_h, nl * sizeof(float), cudaMemcpyHostToDevice));

    float *dfc = dev_alloc((size_t)CLASSES * (size_t)k);
    CUBLAS_OK(cublasSgemm(m->blas, CUBLAS_OP_N, CUBLAS_OP_T, k, CLASSES, b, &one, a2, k, dlogits,
                          CLASSES, &zero, dfc, k));
    float *da2 = dev_alloc(n2);
    CUBLAS_OK(cublasSgemm(m->blas, CUBLAS_OP_N, CUBLAS_OP_N, k, b, CLASSES, &one, m->fc, k, dlogits,
                          CLASSES, &zero, da2, k));
    dev_free(dlogits);
    float *dz2 = dev_alloc(n2);
    relu_backward(m, c2->y_desc, a2, da2, z2, dz2);
    dev_free(da2);
    dev_free(a2);
    dev_free(z2);
    float *dw2 = dev_alloc(c2->w_count);
    conv_backward_filter(m->dnn, c2, a1, dz2, dw2);
    float *da1 = dev_alloc(n1);
    conv_backward_data(m->dnn, c2, dz2, da1);
    dev_free(dz2);
    float *dz1 = dev_alloc(n1);
    relu_backward(m, c1->y_desc, a1, da1, z1, dz1);
    dev_free(da1);
    dev_free(a1);
    dev_free(z1);
    float *dw1 = dev_alloc(c1->w_count);
    conv_backward_filter(m->dnn, c1, x, dz1, dw1);
    dev_free(dz1);
    dev_free(x);

    sgd(m, m->fc, dfc, (size_t)CLASSES * (size_t)k);
    sgd(m, c2->w, dw2, c2->w_count);
    sgd(m, c1->w, dw1, c1->w_count);
    dev_free(dfc);
    dev_free(dw2);
    dev_free(dw1);
    return loss / b;
}

static int parse_int(const char *text, int lo, int hi, int *out)
{
    char *end;
    long v = strtol(text, &end, 10);
    if (*text == '\0' || *end != '\0' || v < lo || v > hi)
        return -1;
    *out = (int)v;
    return 0;
}

int main(int argc, char **argv)
{
    int steps = 60, every = 5, batch = 64;
    for (int i = 1; i < argc; i++) {
        int *dst = NULL;
        if (strcmp(argv[i], "--steps") == 0)
            dst = &steps;
        else if (strcmp(argv[i], "--print-every") == 0)
            dst = &every;
        else if (strcmp(argv[i], "--batch") == 0)
            dst = &batch;
        if (!dst || i + 1 == argc || parse_int(argv[++i], 1, 1000000, dst) != 0) {
            fprintf(stderr, "usage: %s [--steps N] [--print-every N] [--batch N]\n", argv[0]);
            return 2;
        }
    }

    struct dataset ds;
    if (make_dataset(&ds, batch) != 0) {
        fprintf(stderr, "gpu_train: out of host memory\n");
        return 1;
    }
    float *probs_h = malloc((size_t)batch * CLASSES * sizeof(float));
    if (!probs_h) {
        fprintf(stderr, "gpu_train: out of host memory\n");
        return 1;
    }

    struct cudaDeviceProp prop;
    CUDA_OK(cudaGetDeviceProperties(&prop, 0));
    CUDA_OK(cudaSetDevice(0));
    struct net m = {.batch = batch};
    CUDNN_OK(cudnnCreate(&m.dnn));
    CUBLAS_OK(cublasCreate(&m.blas));
    CUDNN_OK(cudnnCreateActivationDescriptor(&m.relu));
    CUDNN_OK(
        cudnnSetActivationDescriptor(m.relu, CUDNN_ACTIVATION_RELU, CUDNN_NOT_PROPAGATE_NAN, 0.0));
    conv_setup(m.dnn, &m.conv1, batch, CHANNELS, C1, SIDE, 1);
    conv_setup(m.dnn, &m.conv2, batch, C1, C2, m.conv1.hout, 2);
    m.features = C2 * m.conv2.hout * m.conv2.hout;
    m.fc = dev_alloc((size_t)CLASSES * (size_t)m.features);
    upload_random(m.fc, (size_t)CLASSES * (size_t)m.features, sqrtf(1.0f / (float)m.features));
    CUDNN_OK(cudnnCreateTensorDescriptor(&m.logits_desc));
    CUDNN_OK(cudnnSetTensor4dDescriptor(m.logits_desc, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, batch,
                                        CLASSES, 1, 1));
    CUDA_OK(cudaDeviceSynchronize());
    sample_memory();
    size_t used_at_start = mem_peak_used;
    printf("gpu_train: %s, batch %d, %d steps, conv %d-%d-%d, fc %d-%d, "
           "cuDNN %zu, algorithms fwd %d/%d\n",
           prop.name, batch, steps, CHANNELS, C1, C2, m.features, CLASSES, cudnnGetVersion(),
           (int)m.conv1.fwd_algo, (int)m.conv2.fwd_algo);

    size_t image = (size_t)CHANNELS * SIDE * SIDE;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    double loss = 0;
    for (int step = 1; step <= steps; step++) {
        size_t first = (size_t)((step - 1) % DATASET_BATCHES) * (size_t)batch;
        loss = train_step(&m, ds.images + first * image, ds.labels + first, probs_h);
        if (step % every == 0 || step == steps)
            printf("step %d loss %.9g\n", step, loss);
    }
    CUDA_OK(cudaDeviceSynchronize());
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double seconds = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    printf("final loss %.9g\n", loss);
    printf("steps/s %.2f\n", steps / seconds);
    printf("peak device memory used %.1f MiB of %.1f MiB (cudaMemGetInfo), %.1f MiB above the "
           "start\n",
           (double)mem_peak_used / 1048576.0, (double)mem_total / 1048576.0,
           (double)(mem_peak_used - used_at_start) / 1048576.0);

    dev_free(m.fc);
    conv_teardown(&m.conv1);
    conv_teardown(&m.conv2);
    cudnnDestroyTensorDescriptor(m.logits_desc);
    cudnnDestroyActivationDescriptor(m.relu);
    cublasDestroy(m.blas);
    cudnnDestroy(m.dnn);
    free(probs_h);
    free(ds.images);
    free(ds.labels);
    return 0;
}
