// OpenGL implementation of the display (display/display.hpp).
#include <GL/glew.h>
// GLEW first: it replaces the GL headers.
#include <EGL/egl.h>
#include <EGL/eglext.h>
#include <GLFW/glfw3.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstring>
#include <mutex>
#include <thread>

#if VFPIPE_HAVE_CUDA
#include <cuda_gl_interop.h>
#include <cuda_runtime.h>

#include <atomic>

#include "cuda/display_compose.hpp"
#endif

#include "core/error.hpp"
#include "core/log.hpp"
#include "cpu/convert_ops.hpp"
#include "display/display.hpp"
#include "display/font.hpp"

namespace vfp {

namespace {
#include "shaders.inc"  // kDisplayVert, kDisplayFrag, kTextVert, kTextFrag (generated from shaders/)

[[noreturn]] void gl_fail(const std::string& what) { throw Error(ErrorKind::Output, "display: " + what); }

void check_gl(const char* where) {
  const GLenum e = glGetError();
  if (e != GL_NO_ERROR) gl_fail(log::format("OpenGL error 0x%04x in %s", e, where));
}

GLuint compile(GLenum type, const char* src, const char* name) {
  GLuint s = glCreateShader(type);
  glShaderSource(s, 1, &src, nullptr);
  glCompileShader(s);
  GLint ok = 0;
  glGetShaderiv(s, GL_COMPILE_STATUS, &ok);
  if (!ok) {
    char logbuf[2048];
    glGetShaderInfoLog(s, sizeof logbuf, nullptr, logbuf);
    gl_fail(std::string("shader ") + name + " does not compile: " + logbuf);
  }
  return s;
}

GLuint program(const char* vs, const char* fs, const char* name) {
  GLuint p = glCreateProgram();
  GLuint a = compile(GL_VERTEX_SHADER, vs, name), b = compile(GL_FRAGMENT_SHADER, fs, name);
  glAttachShader(p, a);
  glAttachShader(p, b);
  glLinkProgram(p);
  glDeleteShader(a);
  glDeleteShader(b);
  GLint ok = 0;
  glGetProgramiv(p, GL_LINK_STATUS, &ok);
  if (!ok) {
    char logbuf[2048];
    glGetProgramInfoLog(p, sizeof logbuf, nullptr, logbuf);
    gl_fail(std::string("program ") + name + " does not link: " + logbuf);
  }
  return p;
}

int format_code(PixelFormat f) {
  switch (f) {
    case PixelFormat::GRAY8:
      return 0;
    case PixelFormat::YUV420P:
    case PixelFormat::YUV444P:
      return 1;
    case PixelFormat::RGB24:
      return 2;
    case PixelFormat::BGR24:
      return 3;
    default:
      return 0;
  }
}

// One frame's textures, fed through two alternating pixel buffer objects: the frame is
// written into one while the texture upload of the previous frame may still read the other.
class FrameTextures {
 public:
  explicit FrameTextures(const FrameSpec& spec) : spec_(spec), layout_(FrameLayout::of(spec)) {
    const bool packed = is_packed_rgb(spec.format);
    glGenTextures(layout_.planes, tex_);
    for (int p = 0; p < layout_.planes; ++p) {
      glBindTexture(GL_TEXTURE_2D, tex_[p]);
      glTexParameteri(GL_TEXTURE_2D, GL_TEXTURE_MIN_FILTER, GL_NEAREST);
      glTexParameteri(GL_TEXTURE_2D, GL_TEXTURE_MAG_FILTER, GL_NEAREST);
      glTexParameteri(GL_TEXTURE_2D, GL_TEXTURE_WRAP_S, GL_CLAMP_TO_EDGE);
      glTexParameteri(GL_TEXTURE_2D, GL_TEXTURE_WRAP_T, GL_CLAMP_TO_EDGE);
      glTexImage2D(GL_TEXTURE_2D, 0, packed ? GL_RGB8 : GL_R8, layout_.plane[p].width, layout_.plane[p].height, 0,
                   packed ? GL_RGB : GL_RED, GL_UNSIGNED_BYTE, nullptr);
    }
    // Packed rows are copied tightly (the 256-byte pitch is not a whole number of pixels).
    bytes_ = packed ? static_cast<size_t>(spec.width) * 3 * spec.height : layout_.total_bytes;
    glGenBuffers(2, pbo_);
    for (GLuint b : pbo_) {
      glBindBuffer(GL_PIXEL_UNPACK_BUFFER, b);
      glBufferData(GL_PIXEL_UNPACK_BUFFER, static_cast<GLsizeiptr>(bytes_), nullptr, GL_STREAM_DRAW);
    }
    glBindBuffer(GL_PIXEL_UNPACK_BUFFER, 0);
    check_gl("texture setup");
  }
  ~FrameTextures() {
    glDeleteTextures(layout_.planes, tex_);
    glDeleteBuffers(2, pbo_);
  }
  FrameTextures(const FrameTextures&) = delete;
  FrameTextures& operator=(const FrameTextures&) = delete;

  void upload(const HostFrame& f) {
    const GLuint pbo = pbo_[next_];
    next_ ^= 1;
    glBindBuffer(GL_PIXEL_UNPACK_BUFFER, pbo);
    // Orphan the old storage: no wait for a pending read of this buffer.
    glBufferData(GL_PIXEL_UNPACK_BUFFER, static_cast<GLsizeiptr>(bytes_), nullptr, GL_STREAM_DRAW);
    auto* dst = static_cast<uint8_t*>(glMapBufferRange(GL_PIXEL_UNPACK_BUFFER, 0, static_cast<GLsizeiptr>(bytes_),
                                                       GL_MAP_WRITE_BIT | GL_MAP_INVALIDATE_BUFFER_BIT));
    if (!dst) gl_fail("cannot map a pixel buffer");
    const bool packed = is_packed_rgb(spec_.format);
    if (packed) {
      const size_t row = static_cast<size_t>(spec_.width) * 3;
      for (int y = 0; y < spec_.height; ++y) std::memcpy(dst + y * row, f.view().row(0, y), row);
    } else {
      std::memcpy(dst, f.data(), bytes_);
    }
    glUnmapBuffer(GL_PIXEL_UNPACK_BUFFER);
    upload_from(pbo);
  }
  // Textures from a pixel buffer holding the frame in upload()'s layout (the GPU path
  // fills such buffers with CUDA).
  void upload_from(GLuint pbo) {
    const bool packed = is_packed_rgb(spec_.format);
    glBindBuffer(GL_PIXEL_UNPACK_BUFFER, pbo);
    glPixelStorei(GL_UNPACK_ALIGNMENT, 1);
    for (int p = 0; p < layout_.planes; ++p) {
      const PlaneLayout& pl = layout_.plane[p];
      glPixelStorei(GL_UNPACK_ROW_LENGTH, packed ? 0 : static_cast<GLint>(pl.pitch));
      glBindTexture(GL_TEXTURE_2D, tex_[p]);
      glTexSubImage2D(GL_TEXTURE_2D, 0, 0, 0, pl.width, pl.height, packed ? GL_RGB : GL_RED, GL_UNSIGNED_BYTE,
                      reinterpret_cast<const void*>(packed ? 0 : pl.offset));
    }
    glPixelStorei(GL_UNPACK_ROW_LENGTH, 0);
    glBindBuffer(GL_PIXEL_UNPACK_BUFFER, 0);
    check_gl("frame upload");
  }
  // Binds plane i (the last plane repeated for gray/packed) to texture units base..base+2.
  void bind(int base) const {
    for (int i = 0; i < 3; ++i) {
      glActiveTexture(static_cast<GLenum>(GL_TEXTURE0 + base + i));
      glBindTexture(GL_TEXTURE_2D, tex_[std::min(i, layout_.planes - 1)]);
    }
  }
  const FrameSpec& spec() const { return spec_; }
  size_t bytes() const { return bytes_; }

 private:
  FrameSpec spec_;
  FrameLayout layout_;
  GLuint tex_[kMaxPlanes] = {};
  GLuint pbo_[2] = {};
  size_t bytes_ = 0;
  int next_ = 0;
};

#if VFPIPE_HAVE_CUDA
// The GPU path. The worker thread copies each frame's device buffers (output and input)
// into a staging slot on its compute stream, in stream order, and records an event; the
// display thread waits for that event on its own stream, maps a pair of pixel buffers
// registered with CUDA once, copies the slot into them, unmaps, and uploads the textures
// from them. The frames never return to the host for the display.
class CudaInterop final : public DeviceTap {
 public:
  CudaInterop(const FrameSpec& a, const FrameSpec& b) : a_(a), b_(b) {
    la_ = FrameLayout::of(a);
    lb_ = FrameLayout::of(b);
    slot_bytes_ = la_.total_bytes + lb_.total_bytes;
    check(cudaMalloc(&staging_, slot_bytes_ * kSlots), "cudaMalloc (display staging)");
    for (int i = 0; i < kSlots; ++i) {
      check(cudaEventCreateWithFlags(&done_[i], cudaEventDisableTiming), "cudaEventCreate");
      busy_[i] = false;
    }
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    check(cudaEventCreate(&t0_), "cudaEventCreate");
    check(cudaEventCreate(&t1_), "cudaEventCreate");
    for (int k = 0; k < 2; ++k)
      for (int j = 0; j < 2; ++j) {
        const size_t bytes = tight_bytes(j == 0 ? a_ : b_);
        glGenBuffers(1, &pbo_[k][j]);
        glBindBuffer(GL_PIXEL_UNPACK_BUFFER, pbo_[k][j]);
        // DYNAMIC_COPY: written by the GPU, read by the GPU — video memory (STREAM_DRAW
        // buffers may live in host memory, and every texture upload would cross PCIe).
        glBufferData(GL_PIXEL_UNPACK_BUFFER, static_cast<GLsizeiptr>(bytes), nullptr, GL_DYNAMIC_COPY);
        glBindBuffer(GL_PIXEL_UNPACK_BUFFER, 0);
        check(cudaGraphicsGLRegisterBuffer(&res_[k][j], pbo_[k][j], cudaGraphicsRegisterFlagsWriteDiscard),
              "cudaGraphicsGLRegisterBuffer");
      }
  }
  ~CudaInterop() override {
    cudaStreamSynchronize(stream_);
    for (auto& pair : res_)
      for (auto& r : pair)
        if (r) cudaGraphicsUnregisterResource(r);
    for (auto& pair : pbo_) glDeleteBuffers(2, pair);
    for (auto& e : done_) cudaEventDestroy(e);
    cudaEventDestroy(t0_);
    cudaEventDestroy(t1_);
    cudaStreamDestroy(stream_);
    cudaFree(staging_);
  }

  int copy(const uint8_t* out_dev, const uint8_t* src_dev, CUstream_st* s) override {
    // The next free slot (the display holds the frames queued for it and the one on screen).
    int i = -1;
    for (int k = 0; k < kSlots && i < 0; ++k) {
      const int c = static_cast<int>(next_++ % kSlots);
      if (!busy_[c].exchange(true)) i = c;
    }
    if (i < 0) return -1;  // the display is far behind: this frame goes the host way
    uint8_t* dst = staging_ + static_cast<size_t>(i) * slot_bytes_;
    if (cudaMemcpyAsync(dst, out_dev, la_.total_bytes, cudaMemcpyDeviceToDevice, s) != cudaSuccess ||
        (src_dev && cudaMemcpyAsync(dst + la_.total_bytes, src_dev, lb_.total_bytes, cudaMemcpyDeviceToDevice, s) !=
                        cudaSuccess) ||
        cudaEventRecord(done_[i], s) != cudaSuccess) {
      busy_[i] = false;
      return -1;
    }
    return i;
  }

  // Display thread: the slot's frames into the buffer pair k; frees the slot.
  void to_buffers(int slot, int k, bool with_source) {
    check(cudaStreamWaitEvent(stream_, done_[slot], 0), "cudaStreamWaitEvent");
    check(cudaGraphicsMapResources(2, res_[k], stream_), "cudaGraphicsMapResources");
    const uint8_t* src = staging_ + static_cast<size_t>(slot) * slot_bytes_;
    for (int j = 0; j < (with_source ? 2 : 1); ++j) {
      void* p = nullptr;
      size_t n = 0;
      check(cudaGraphicsResourceGetMappedPointer(&p, &n, res_[k][j]), "cudaGraphicsResourceGetMappedPointer");
      const FrameSpec& spec = j == 0 ? a_ : b_;
      const FrameLayout& lay = j == 0 ? la_ : lb_;
      const uint8_t* from = src + (j == 0 ? 0 : la_.total_bytes);
      if (is_packed_rgb(spec.format))  // tight rows, as the textures' upload expects
        check(cudaMemcpy2DAsync(p, static_cast<size_t>(spec.width) * 3, from, lay.plane[0].pitch,
                                static_cast<size_t>(spec.width) * 3, static_cast<size_t>(spec.height),
                                cudaMemcpyDeviceToDevice, stream_),
              "cudaMemcpy2DAsync");
      else
        check(cudaMemcpyAsync(p, from, lay.total_bytes, cudaMemcpyDeviceToDevice, stream_), "cudaMemcpyAsync");
    }
    // Unmap: CUDA's work on the buffers completes before any GL command issued after it.
    check(cudaGraphicsUnmapResources(2, res_[k], stream_), "cudaGraphicsUnmapResources");
    check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    busy_[slot] = false;
  }
  void release(int slot) { busy_[slot] = false; }
  GLuint buffer(int k, int j) const { return pbo_[k][j]; }

  // Display thread: composes the slot's frames into the framebuffer texture registered as
  // `fb` (RGBA8, w x h); the slot stays taken (redraws compose it again) until release().
  // Returns the kernel's GPU milliseconds.
  float compose(int slot, bool with_source, cudaGraphicsResource_t fb, int w, int h, const cuda::ComposeParams& p) {
    check(cudaStreamWaitEvent(stream_, done_[slot], 0), "cudaStreamWaitEvent");
    check(cudaGraphicsMapResources(1, &fb, stream_), "cudaGraphicsMapResources (framebuffer)");
    cudaArray_t arr = nullptr;
    check(cudaGraphicsSubResourceGetMappedArray(&arr, fb, 0, 0), "cudaGraphicsSubResourceGetMappedArray");
    cudaResourceDesc rd{};
    rd.resType = cudaResourceTypeArray;
    rd.res.array.array = arr;
    cudaSurfaceObject_t surf = 0;
    check(cudaCreateSurfaceObject(&surf, &rd), "cudaCreateSurfaceObject");
    const uint8_t* base = staging_ + static_cast<size_t>(slot) * slot_bytes_;
    const cuda::ComposeFrame fa = frame(a_, la_, base), fbm = with_source ? frame(b_, lb_, base + la_.total_bytes) : fa;
    check(cudaEventRecord(t0_, stream_), "cudaEventRecord");
    cuda::compose_rgba_async(surf, w, h, fa, fbm, p, stream_);
    check(cudaEventRecord(t1_, stream_), "cudaEventRecord");
    check(cudaGraphicsUnmapResources(1, &fb, stream_), "cudaGraphicsUnmapResources (framebuffer)");
    check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    cudaDestroySurfaceObject(surf);
    float ms = 0;
    cudaEventElapsedTime(&ms, t0_, t1_);
    return ms;
  }

 private:
  static constexpr int kSlots = 16;  // > frames in flight + queued for the sink + on screen
  static cuda::ComposeFrame frame(const FrameSpec& s, const FrameLayout& l, const uint8_t* base) {
    cuda::ComposeFrame f;
    for (int i = 0; i < l.planes && i < 3; ++i) {
      f.planes[i] = base + l.plane[i].offset;
      f.pitch[i] = static_cast<int>(l.plane[i].pitch);
    }
    f.w = s.width;
    f.h = s.height;
    f.format = format_code(s.format);
    f.chroma_shift = s.format == PixelFormat::YUV420P ? 1 : 0;
    const conv::YuvMatrix m = conv::yuv_matrix(s.color, s.width, s.height);
    const int k[6] = {m.cy, m.rv, m.gu, m.gv, m.bu, m.yoff};
    std::copy(k, k + 6, f.yuv);
    return f;
  }
  static size_t tight_bytes(const FrameSpec& s) {
    return is_packed_rgb(s.format) ? static_cast<size_t>(s.width) * 3 * s.height : FrameLayout::of(s).total_bytes;
  }
  static void check(cudaError_t e, const char* what) {
    if (e != cudaSuccess) gl_fail(log::format("%s: %s", what, cudaGetErrorString(e)));
  }
  FrameSpec a_, b_;
  FrameLayout la_, lb_;
  size_t slot_bytes_ = 0;
  uint8_t* staging_ = nullptr;
  cudaEvent_t done_[kSlots] = {};
  std::atomic<bool> busy_[kSlots];
  std::atomic<unsigned> next_{0};
  cudaStream_t stream_ = nullptr;
  cudaEvent_t t0_ = nullptr, t1_ = nullptr;
  GLuint pbo_[2][2] = {};
  cudaGraphicsResource_t res_[2][2] = {};
};
#endif

// GLFW is process-wide: initialised once, on first use.
std::mutex g_glfw_mu;
int g_glfw_users = 0;

class GlDisplay final : public Display {
 public:
  GlDisplay(const DisplayOptions& o, const FrameSpec& filtered, const FrameSpec& original) : opt_(o) {
    const bool sbs = o.view == DisplayView::SideBySide;
    fb_w_ = o.width > 0 ? o.width : filtered.width * (sbs ? 2 : 1);
    fb_h_ = o.height > 0 ? o.height : filtered.height;
    if (o.headless)
      make_egl();
    else
      make_window();
    glewExperimental = GL_TRUE;
    const GLenum ge = glewInit();
    // Under EGL, GLEW loads the entry points and then fails looking for GLX: not an error.
    if (ge != GLEW_OK && !(o.headless && ge == GLEW_ERROR_NO_GLX_DISPLAY))
      gl_fail(log::format("glewInit failed: %s", reinterpret_cast<const char*>(glewGetErrorString(ge))));
    glGetError();  // GLEW may leave one behind
    if (!GLEW_VERSION_3_3) gl_fail("OpenGL 3.3 or newer is required, got " + gl_string(GL_VERSION));
    renderer_ = gl_string(GL_RENDERER) + ", OpenGL " + gl_string(GL_VERSION);
    image_prog_ = program(kDisplayVert, kDisplayFrag, "display");
    text_prog_ = program(kTextVert, kTextFrag, "text");
    glGenVertexArrays(1, &vao_);
    glGenQueries(6, &ts_[0][0]);
    filtered_ = std::make_unique<FrameTextures>(filtered);
    original_ = std::make_unique<FrameTextures>(original);
    make_font();
#if VFPIPE_HAVE_CUDA
    if (o.cuda_interop) {
      try {
        interop_ = std::make_unique<CudaInterop>(filtered, original);
        compose_ = o.cuda_compose;
      } catch (const Error& e) {
        log::warn("display: no CUDA-GL interop (%s); frames are shown from host memory", e.what());
        glGetError();
      }
    }
#endif
    view_ = o.view;
    divider_ = o.divider;
    check_gl("display setup");
  }

  ~GlDisplay() override {
#if VFPIPE_HAVE_CUDA
    if (fb_res_) cudaGraphicsUnregisterResource(fb_res_);
    interop_.reset();
#endif
    if (fb_tex_) glDeleteTextures(1, &fb_tex_);
    filtered_.reset();
    original_.reset();
    if (font_tex_) glDeleteTextures(1, &font_tex_);
    if (text_vbo_) glDeleteBuffers(1, &text_vbo_);
    if (text_vao_) glDeleteVertexArrays(1, &text_vao_);
    if (vao_) glDeleteVertexArrays(1, &vao_);
    if (ts_[0][0]) glDeleteQueries(6, &ts_[0][0]);
    if (image_prog_) glDeleteProgram(image_prog_);
    if (text_prog_) glDeleteProgram(text_prog_);
    if (fbo_) glDeleteFramebuffers(1, &fbo_);
    if (rbo_) glDeleteRenderbuffers(1, &rbo_);
    if (window_) {
      glfwDestroyWindow(window_);
      std::lock_guard<std::mutex> lk(g_glfw_mu);
      if (--g_glfw_users == 0) glfwTerminate();
    }
    if (egl_display_ != EGL_NO_DISPLAY) {
      eglMakeCurrent(egl_display_, EGL_NO_SURFACE, EGL_NO_SURFACE, EGL_NO_CONTEXT);
      if (egl_context_ != EGL_NO_CONTEXT) eglDestroyContext(egl_display_, egl_context_);
      if (egl_surface_ != EGL_NO_SURFACE) eglDestroySurface(egl_display_, egl_surface_);
      eglTerminate(egl_display_);
    }
  }

  void show(const HostFrame& filtered, const HostFrame* original, const std::vector<std::string>& text,
            const std::vector<std::string>& overlay) override {
    const auto t0 = std::chrono::steady_clock::now();
#if VFPIPE_HAVE_CUDA
    if (last_slot_ >= 0) {  // the picture is drawn from these host frames now
      interop_->release(last_slot_);
      last_slot_ = -1;
    }
#endif
    const int q = begin_gpu_timing();
    filtered_->upload(filtered);
    has_original_ = original != nullptr;
    if (original) original_->upload(*original);
    glQueryCounter(ts_[q][1], GL_TIMESTAMP);
    draw(text, overlay, true);
    ++shown_;
    last_ms_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  }
  DeviceTap* device_tap() override {
#if VFPIPE_HAVE_CUDA
    return interop_.get();
#else
    return nullptr;
#endif
  }
  void show_device(int slot, bool with_source, const std::vector<std::string>& text,
                   const std::vector<std::string>& overlay) override {
#if VFPIPE_HAVE_CUDA
    const auto t0 = std::chrono::steady_clock::now();
    if (compose_) {
      // CUDA draws the picture into the framebuffer's texture; GL adds the text and presents.
      int w = fb_w_, h = fb_h_;
      if (window_) glfwGetFramebufferSize(window_, &w, &h);
      if (w >= 1 && h >= 1) size_framebuffer(w, h);
      if (compose_ && w >= 1 && h >= 1) {
        const int q = begin_gpu_timing();
        compose_ms_ = interop_->compose(slot, with_source, fb_res_, w, h, compose_params(w, h));
        // GPU time: the composition (CUDA, this frame) stands for the upload; the text
        // drawing comes from the GL timestamps (an earlier frame's, never waited for).
        upload_ms_ = compose_ms_;
        gpu_ms_ = compose_ms_ + draw_ms_;
        // Keep this frame's slot for redraws (pause, view keys); free the previous one.
        if (last_slot_ >= 0 && last_slot_ != slot) interop_->release(last_slot_);
        last_slot_ = slot;
        last_with_source_ = with_source;
        glQueryCounter(ts_[q][1], GL_TIMESTAMP);
        draw(text, overlay, true, false);
        ++shown_;
        last_ms_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        return;
      }
    }
    const int q = begin_gpu_timing();
    const int k = static_cast<int>(shown_ & 1);
    interop_->to_buffers(slot, k, with_source);
    filtered_->upload_from(interop_->buffer(k, 0));
    has_original_ = with_source;
    if (with_source) original_->upload_from(interop_->buffer(k, 1));
    glQueryCounter(ts_[q][1], GL_TIMESTAMP);
    draw(text, overlay, true);
    ++shown_;
    last_ms_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
#else
    (void)slot, (void)with_source, (void)text, (void)overlay;
#endif
  }
  void release_slot(int slot) override {
#if VFPIPE_HAVE_CUDA
    if (interop_) interop_->release(slot);
#else
    (void)slot;
#endif
  }
  void redraw(const std::vector<std::string>& text, const std::vector<std::string>& overlay) override {
#if VFPIPE_HAVE_CUDA
    if (compose_ && last_slot_ >= 0) {  // the picture lives in a slot: compose it again
      int w = fb_w_, h = fb_h_;
      if (window_) glfwGetFramebufferSize(window_, &w, &h);
      if (w < 1 || h < 1) return;
      size_framebuffer(w, h);
      if (compose_) {
        interop_->compose(last_slot_, last_with_source_, fb_res_, w, h, compose_params(w, h));
        draw(text, overlay, false, false);
        return;
      }
    }
#endif
    draw(text, overlay);
  }

  DisplayInput poll() override {
    DisplayInput in;
    if (window_) {
      glfwPollEvents();
      in.keys.swap(keys_);
      in.close = glfwWindowShouldClose(window_) != 0;
    }
    return in;
  }

  std::vector<uint8_t> read_rgb(int* width, int* height) override {
    const int w = rb_w_, h = rb_h_;
    std::vector<uint8_t> px(static_cast<size_t>(w) * h * 3), out(px.size());
    glBindFramebuffer(GL_READ_FRAMEBUFFER, fbo_);
    glReadBuffer(GL_COLOR_ATTACHMENT0);
    glPixelStorei(GL_PACK_ALIGNMENT, 1);
    glReadPixels(0, 0, w, h, GL_RGB, GL_UNSIGNED_BYTE, px.data());
    check_gl("glReadPixels");
    for (int y = 0; y < h; ++y)  // GL's rows run bottom up
      std::memcpy(&out[static_cast<size_t>(y) * w * 3], &px[static_cast<size_t>(h - 1 - y) * w * 3],
                  static_cast<size_t>(w) * 3);
    *width = w;
    *height = h;
    return out;
  }

  void set_view(DisplayView v) override { view_ = v; }
  void set_patch(int level) override { patch_ = level; }
  DisplayView view() const override { return view_; }
  std::string renderer() const override { return renderer_; }
  double last_show_ms() const override { return last_ms_; }
  double last_gpu_ms() const override { return gpu_ms_; }
  void last_gpu_split(double* upload_ms, double* draw_ms) const override {
    *upload_ms = upload_ms_;
    *draw_ms = draw_ms_;
  }

 private:
  // The timer query of two frames ago, if its result is there (never waits).
  // GPU time of a frame's upload + draw by timestamps, read two frames later (never waits):
  // reads the results of the slot about to be reused, and starts it. Returns the slot.
  int begin_gpu_timing() {
    const int q = static_cast<int>(shown_ & 1);
    read_query(q);
    timing_slot_ = q;
    glQueryCounter(ts_[q][0], GL_TIMESTAMP);
    return q;
  }

  // Timestamps before the upload, between upload and draw, after the draw.
  void read_query(int q) {
    if (shown_ < 2) return;
    GLint ready = 0;
    glGetQueryObjectiv(ts_[q][2], GL_QUERY_RESULT_AVAILABLE, &ready);
    if (ready) {
      GLuint64 t[3] = {};
      for (int i = 0; i < 3; ++i) glGetQueryObjectui64v(ts_[q][i], GL_QUERY_RESULT, &t[i]);
      upload_ms_ = (t[1] - t[0]) / 1e6;
      draw_ms_ = (t[2] - t[1]) / 1e6;
      gpu_ms_ = (t[2] - t[0]) / 1e6;
    }
  }

  static std::string gl_string(GLenum e) {
    const GLubyte* s = glGetString(e);
    return s ? reinterpret_cast<const char*>(s) : "?";
  }

  void make_window() {
    {
      std::lock_guard<std::mutex> lk(g_glfw_mu);
      // An X server busy with other clients can refuse a connection for a moment: retry.
      for (int attempt = 0; g_glfw_users == 0 && !glfwInit(); ++attempt) {
        const char* why = nullptr;
        glfwGetError(&why);
        if (attempt == 4)
          gl_fail(std::string("cannot open a window (") + (why ? why : "no display") +
                  "); use --display=headless on machines without a screen");
        std::this_thread::sleep_for(std::chrono::milliseconds(100 << attempt));
      }
      ++g_glfw_users;
    }
    glfwWindowHint(GLFW_CONTEXT_VERSION_MAJOR, 3);
    glfwWindowHint(GLFW_CONTEXT_VERSION_MINOR, 3);
    glfwWindowHint(GLFW_OPENGL_PROFILE, GLFW_OPENGL_CORE_PROFILE);
    glfwWindowHint(GLFW_OPENGL_FORWARD_COMPAT, GL_TRUE);
    glfwWindowHint(GLFW_SCALE_TO_MONITOR, GLFW_TRUE);  // HiDPI: the window keeps its size in points
    window_ = glfwCreateWindow(fb_w_, fb_h_, opt_.title.c_str(), nullptr, nullptr);
    if (!window_) {
      const char* why = nullptr;
      glfwGetError(&why);
      std::lock_guard<std::mutex> lk(g_glfw_mu);
      if (--g_glfw_users == 0) glfwTerminate();
      gl_fail(std::string("cannot create an OpenGL 3.3 window: ") + (why ? why : "unknown reason"));
    }
    glfwMakeContextCurrent(window_);
    glfwSwapInterval(opt_.vsync ? 1 : 0);
    glfwSetWindowUserPointer(window_, this);
    glfwSetKeyCallback(window_, [](GLFWwindow* w, int key, int, int action, int) {
      if (action == GLFW_PRESS || action == GLFW_REPEAT)
        static_cast<GlDisplay*>(glfwGetWindowUserPointer(w))->keys_.push_back(key);
    });
    glfwSetCursorPosCallback(window_, [](GLFWwindow* w, double x, double) {
      auto* d = static_cast<GlDisplay*>(glfwGetWindowUserPointer(w));
      if (d->view_ == DisplayView::Split && glfwGetMouseButton(w, GLFW_MOUSE_BUTTON_LEFT) == GLFW_PRESS) {
        int ww = 0, wh = 0;
        glfwGetWindowSize(w, &ww, &wh);
        // The divider follows the pointer across the image (window points -> image fraction).
        const float x0 = (1.f + d->rect_[0]) / 2.f * ww, x1 = (1.f + d->rect_[2]) / 2.f * ww;
        d->divider_ = std::clamp(static_cast<float>((x - x0) / std::max(1.f, x1 - x0)), 0.f, 1.f);
      }
    });
  }

  void make_egl() {
    // The default display first (Mesa: surfaceless/GBM), else the first EGL device (NVIDIA
    // without X).
    egl_display_ = eglGetDisplay(EGL_DEFAULT_DISPLAY);
    EGLint major = 0, minor = 0;
    if (egl_display_ == EGL_NO_DISPLAY || !eglInitialize(egl_display_, &major, &minor)) {
      auto query = reinterpret_cast<PFNEGLQUERYDEVICESEXTPROC>(eglGetProcAddress("eglQueryDevicesEXT"));
      auto platform = reinterpret_cast<PFNEGLGETPLATFORMDISPLAYEXTPROC>(eglGetProcAddress("eglGetPlatformDisplayEXT"));
      EGLDeviceEXT dev[8];
      EGLint n = 0;
      if (!query || !platform || !query(8, dev, &n) || n < 1)
        gl_fail("no EGL display or device for headless rendering");
      egl_display_ = platform(EGL_PLATFORM_DEVICE_EXT, dev[0], nullptr);
      if (egl_display_ == EGL_NO_DISPLAY || !eglInitialize(egl_display_, &major, &minor))
        gl_fail("cannot initialise EGL on the GPU device");
    }
    const EGLint cfg_attr[] = {EGL_SURFACE_TYPE,
                               EGL_PBUFFER_BIT,
                               EGL_RENDERABLE_TYPE,
                               EGL_OPENGL_BIT,
                               EGL_RED_SIZE,
                               8,
                               EGL_GREEN_SIZE,
                               8,
                               EGL_BLUE_SIZE,
                               8,
                               EGL_NONE};
    EGLConfig cfg;
    EGLint n = 0;
    if (!eglChooseConfig(egl_display_, cfg_attr, &cfg, 1, &n) || n < 1) gl_fail("no EGL config for OpenGL");
    const EGLint pb_attr[] = {EGL_WIDTH, 16, EGL_HEIGHT, 16, EGL_NONE};
    egl_surface_ = eglCreatePbufferSurface(egl_display_, cfg, pb_attr);
    if (!eglBindAPI(EGL_OPENGL_API)) gl_fail("EGL has no desktop OpenGL");
    const EGLint ctx_attr[] = {
        EGL_CONTEXT_MAJOR_VERSION,           3,       EGL_CONTEXT_MINOR_VERSION, 3, EGL_CONTEXT_OPENGL_PROFILE_MASK,
        EGL_CONTEXT_OPENGL_CORE_PROFILE_BIT, EGL_NONE};
    egl_context_ = eglCreateContext(egl_display_, cfg, EGL_NO_CONTEXT, ctx_attr);
    if (egl_context_ == EGL_NO_CONTEXT) gl_fail("cannot create an OpenGL 3.3 core context with EGL");
    if (!eglMakeCurrent(egl_display_, egl_surface_, egl_surface_, egl_context_))
      gl_fail("cannot make the EGL context current");
  }

  // Everything is drawn into an offscreen framebuffer of the window's pixel size, then
  // blitted to the window: screenshots read the same pixels in both modes.
  void size_framebuffer(int w, int h) {
    if (fbo_ && w == rb_w_ && h == rb_h_) return;
    if (!fbo_) {
      glGenFramebuffers(1, &fbo_);
      glGenRenderbuffers(1, &rbo_);
    }
    rb_w_ = w;
    rb_h_ = h;
    glBindFramebuffer(GL_FRAMEBUFFER, fbo_);
#if VFPIPE_HAVE_CUDA
    if (compose_) {  // a texture CUDA writes the picture into
      if (fb_res_) cudaGraphicsUnregisterResource(fb_res_);
      fb_res_ = nullptr;
      if (!fb_tex_) glGenTextures(1, &fb_tex_);
      glBindTexture(GL_TEXTURE_2D, fb_tex_);
      glTexImage2D(GL_TEXTURE_2D, 0, GL_RGBA8, w, h, 0, GL_RGBA, GL_UNSIGNED_BYTE, nullptr);
      glTexParameteri(GL_TEXTURE_2D, GL_TEXTURE_MIN_FILTER, GL_NEAREST);
      glTexParameteri(GL_TEXTURE_2D, GL_TEXTURE_MAG_FILTER, GL_NEAREST);
      glFramebufferTexture2D(GL_FRAMEBUFFER, GL_COLOR_ATTACHMENT0, GL_TEXTURE_2D, fb_tex_, 0);
      if (cudaGraphicsGLRegisterImage(&fb_res_, fb_tex_, GL_TEXTURE_2D, cudaGraphicsRegisterFlagsSurfaceLoadStore) !=
          cudaSuccess) {
        cudaGetLastError();
        log::warn("display: cannot register the framebuffer with CUDA; drawing with OpenGL instead");
        compose_ = false;
        fb_res_ = nullptr;
      }
    }
    if (!compose_)
#endif
    {
      glBindRenderbuffer(GL_RENDERBUFFER, rbo_);
      glRenderbufferStorage(GL_RENDERBUFFER, GL_RGBA8, w, h);
      glFramebufferRenderbuffer(GL_FRAMEBUFFER, GL_COLOR_ATTACHMENT0, GL_RENDERBUFFER, rbo_);
    }
    if (glCheckFramebufferStatus(GL_FRAMEBUFFER) != GL_FRAMEBUFFER_COMPLETE)
      gl_fail("offscreen framebuffer incomplete");
  }

  void make_font() {
    const int w = static_cast<int>(font::kCount) * font::kCellW, h = font::kCellH;
    std::vector<uint8_t> px(static_cast<size_t>(w) * h, 0);
    for (size_t g = 0; g < font::kCount; ++g)
      for (int y = 0; y < font::kH; ++y)
        for (int x = 0; x < font::kW; ++x)
          if (font::kGlyphs[g].bits[y * font::kW + x] == '1')
            px[static_cast<size_t>(y) * w + g * font::kCellW + x] = 255;
    glGenTextures(1, &font_tex_);
    glBindTexture(GL_TEXTURE_2D, font_tex_);
    glTexParameteri(GL_TEXTURE_2D, GL_TEXTURE_MIN_FILTER, GL_NEAREST);
    glTexParameteri(GL_TEXTURE_2D, GL_TEXTURE_MAG_FILTER, GL_NEAREST);
    glPixelStorei(GL_UNPACK_ALIGNMENT, 1);
    glTexImage2D(GL_TEXTURE_2D, 0, GL_R8, w, h, 0, GL_RED, GL_UNSIGNED_BYTE, px.data());
    glGenVertexArrays(1, &text_vao_);
    glGenBuffers(1, &text_vbo_);
    glBindVertexArray(text_vao_);
    glBindBuffer(GL_ARRAY_BUFFER, text_vbo_);
    glEnableVertexAttribArray(0);
    glVertexAttribPointer(0, 3, GL_FLOAT, GL_FALSE, 3 * sizeof(float), nullptr);
    glVertexAttribDivisor(0, 1);
    glBindVertexArray(0);
  }

  void draw_text(const std::vector<std::string>& lines, float x, float y, float scale, int vw, int vh) {
    std::vector<float> cells;
    for (size_t r = 0; r < lines.size(); ++r)
      for (size_t c = 0; c < lines[r].size(); ++c) {
        cells.push_back(static_cast<float>(c));
        cells.push_back(static_cast<float>(r));
        cells.push_back(static_cast<float>(font::index_of(lines[r][c])));
      }
    if (cells.empty()) return;
    glUseProgram(text_prog_);
    glBindVertexArray(text_vao_);
    glBindBuffer(GL_ARRAY_BUFFER, text_vbo_);
    glBufferData(GL_ARRAY_BUFFER, static_cast<GLsizeiptr>(cells.size() * sizeof(float)), cells.data(), GL_STREAM_DRAW);
    glActiveTexture(GL_TEXTURE0);
    glBindTexture(GL_TEXTURE_2D, font_tex_);
    glUniform1i(glGetUniformLocation(text_prog_, "font"), 0);
    glUniform1f(glGetUniformLocation(text_prog_, "glyphs"), static_cast<float>(font::kCount));
    glUniform2f(glGetUniformLocation(text_prog_, "origin"), x, y);
    glUniform2f(glGetUniformLocation(text_prog_, "advance"), font::kCellW * scale, font::kCellH * scale);
    glUniform2f(glGetUniformLocation(text_prog_, "viewport"), static_cast<float>(vw), static_cast<float>(vh));
    glDrawArraysInstanced(GL_TRIANGLE_STRIP, 0, 4, static_cast<GLsizei>(cells.size() / 3));
    glBindVertexArray(0);
  }

#if VFPIPE_HAVE_CUDA
  // What the CUDA composition needs to draw the current view at w x h.
  cuda::ComposeParams compose_params(int w, int h) {
    compute_rect(w, h);
    cuda::ComposeParams p;
    std::copy(rect_, rect_ + 4, p.rect);
    p.view = static_cast<int>(view_);
    p.divider = divider_;
    p.diff_gain = opt_.diff_gain;
    return p;
  }
#endif

  // Letterbox: the picture (twice as wide side by side) keeps its aspect ratio, with
  // non-square pixels (anamorphic video) drawn at their shape.
  void compute_rect(int w, int h) {
    const FrameSpec& s = filtered_->spec();
    const double sar = s.sar.known() ? s.sar.value() : 1.0;
    const double pic_w = s.width * sar * (view_ == DisplayView::SideBySide ? 2.0 : 1.0), pic_h = s.height;
    const double k = std::min(w / pic_w, h / pic_h);
    const double pw = pic_w * k, ph = pic_h * k;
    rect_[0] = static_cast<float>(-pw / w);
    rect_[1] = static_cast<float>(-ph / h);
    rect_[2] = static_cast<float>(pw / w);
    rect_[3] = static_cast<float>(ph / h);
  }

  // `picture` false: CUDA already composed the picture into the framebuffer.
  void draw(const std::vector<std::string>& text, const std::vector<std::string>& overlay, bool timed = false,
            bool picture = true) {
    int w = fb_w_, h = fb_h_;
    if (window_) glfwGetFramebufferSize(window_, &w, &h);
    if (w < 1 || h < 1) {  // minimised
      if (timed) glQueryCounter(ts_[timing_slot_][2], GL_TIMESTAMP);
      return;
    }
    size_framebuffer(w, h);
    glBindFramebuffer(GL_FRAMEBUFFER, fbo_);
    glViewport(0, 0, w, h);
    if (picture) draw_picture(w, h);
    if (patch_ >= 0) {  // glass-to-glass: the centre half of the window, black or white
      glEnable(GL_SCISSOR_TEST);
      glScissor(w / 4, h / 4, w / 2, h / 2);
      const float v = patch_ ? 1.f : 0.f;
      glClearColor(v, v, v, 1.f);
      glClear(GL_COLOR_BUFFER_BIT);
      glDisable(GL_SCISSOR_TEST);
    }
    draw_text_layers(text, overlay, w, h, timed);
  }

  void draw_picture(int w, int h) {
    glClearColor(0.08f, 0.08f, 0.08f, 1.f);
    glClear(GL_COLOR_BUFFER_BIT);
    compute_rect(w, h);
    const FrameSpec& s = filtered_->spec();
    glUseProgram(image_prog_);
    glBindVertexArray(vao_);
    filtered_->bind(0);
    (has_original_ ? original_ : filtered_)->bind(3);
    const GLint a[3] = {0, 1, 2}, b[3] = {3, 4, 5};
    glUniform1iv(glGetUniformLocation(image_prog_, "planes_a"), 3, a);
    glUniform1iv(glGetUniformLocation(image_prog_, "planes_b"), 3, b);
    glUniform1i(glGetUniformLocation(image_prog_, "format_a"), format_code(s.format));
    glUniform1i(glGetUniformLocation(image_prog_, "format_b"),
                format_code((has_original_ ? original_ : filtered_)->spec().format));
    // The frames' YUV -> RGB coefficients (conv::YuvMatrix), exact in float.
    const auto coefficients = [](const FrameSpec& f) {
      const conv::YuvMatrix m = conv::yuv_matrix(f.color, f.width, f.height);
      return std::array<float, 6>{static_cast<float>(m.cy), static_cast<float>(m.rv), static_cast<float>(m.gu),
                                  static_cast<float>(m.gv), static_cast<float>(m.bu), static_cast<float>(m.yoff)};
    };
    glUniform1fv(glGetUniformLocation(image_prog_, "yuv_a"), 6, coefficients(s).data());
    glUniform1fv(glGetUniformLocation(image_prog_, "yuv_b"), 6,
                 coefficients((has_original_ ? original_ : filtered_)->spec()).data());
    glUniform1i(glGetUniformLocation(image_prog_, "view"), static_cast<int>(view_));
    glUniform1f(glGetUniformLocation(image_prog_, "divider"), divider_);
    glUniform1f(glGetUniformLocation(image_prog_, "diff_gain"), opt_.diff_gain);
    glUniform4fv(glGetUniformLocation(image_prog_, "rect"), 1, rect_);
    glDrawArrays(GL_TRIANGLE_STRIP, 0, 4);
  }

  // HUD and help text over the picture (scaled with the framebuffer: HiDPI), then present.
  void draw_text_layers(const std::vector<std::string>& text, const std::vector<std::string>& overlay, int w, int h,
                        bool timed) {
    const float scale = std::max(2.f, std::round(h / 360.f));
    glEnable(GL_BLEND);
    glBlendFunc(GL_SRC_ALPHA, GL_ONE_MINUS_SRC_ALPHA);
    if (opt_.hud) draw_text(text, 8.f, 8.f, scale, w, h);
    if (!overlay.empty()) {
      size_t cols = 0;
      for (const auto& l : overlay) cols = std::max(cols, l.size());
      const float ox = (w - static_cast<float>(cols) * font::kCellW * scale) / 2.f;
      const float oy = (h - static_cast<float>(overlay.size()) * font::kCellH * scale) / 2.f;
      draw_text(overlay, std::max(0.f, ox), std::max(0.f, oy), scale, w, h);
    }
    glDisable(GL_BLEND);
    if (timed) glQueryCounter(ts_[timing_slot_][2], GL_TIMESTAMP);
    if (window_) {
      glBindFramebuffer(GL_READ_FRAMEBUFFER, fbo_);
      glBindFramebuffer(GL_DRAW_FRAMEBUFFER, 0);
      glBlitFramebuffer(0, 0, w, h, 0, 0, w, h, GL_COLOR_BUFFER_BIT, GL_NEAREST);
      glfwSwapBuffers(window_);
    } else {
      glFinish();
    }
    check_gl("draw");
  }

  DisplayOptions opt_;
  int fb_w_ = 0, fb_h_ = 0;  // requested size
  int rb_w_ = 0, rb_h_ = 0;  // offscreen framebuffer size
  GLFWwindow* window_ = nullptr;
  EGLDisplay egl_display_ = EGL_NO_DISPLAY;
  EGLContext egl_context_ = EGL_NO_CONTEXT;
  EGLSurface egl_surface_ = EGL_NO_SURFACE;
  GLuint fbo_ = 0, rbo_ = 0, vao_ = 0, image_prog_ = 0, text_prog_ = 0, font_tex_ = 0, text_vao_ = 0, text_vbo_ = 0;
  std::unique_ptr<FrameTextures> filtered_, original_;
  bool has_original_ = false;
  DisplayView view_ = DisplayView::Split;
  float divider_ = 0.5f;
  int patch_ = -1;
  float rect_[4] = {-1, -1, 1, 1};
  std::vector<int> keys_;
  std::string renderer_;
  double last_ms_ = 0, gpu_ms_ = 0, upload_ms_ = 0, draw_ms_ = 0;
  GLuint ts_[2][3] = {};  // GL_TIMESTAMP queries of two frames
  int timing_slot_ = 0;
  uint64_t shown_ = 0;
#if VFPIPE_HAVE_CUDA
  std::unique_ptr<CudaInterop> interop_;
  bool compose_ = false;  // CUDA composes the picture (GPU path)
  int last_slot_ = -1;    // the slot of the picture on screen
  bool last_with_source_ = false;
  cudaGraphicsResource_t fb_res_ = nullptr;  // the framebuffer texture, registered
  float compose_ms_ = 0;
#endif
  GLuint fb_tex_ = 0;
};

}  // namespace

bool parse_display_view(const std::string& s, DisplayView* v) {
  if (s == "filtered")
    *v = DisplayView::Filtered;
  else if (s == "split")
    *v = DisplayView::Split;
  else if (s == "side-by-side" || s == "sbs")
    *v = DisplayView::SideBySide;
  else if (s == "difference" || s == "diff")
    *v = DisplayView::Difference;
  else
    return false;
  return true;
}

const char* display_view_name(DisplayView v) {
  static const char* n[] = {"filtered", "split", "side-by-side", "difference"};
  return n[static_cast<int>(v)];
}

std::unique_ptr<Display> Display::create(const DisplayOptions& opts, const FrameSpec& filtered,
                                         const FrameSpec& original) {
  return std::make_unique<GlDisplay>(opts, filtered, original);
}

}  // namespace vfp
