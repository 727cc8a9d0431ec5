#version 330 core
// Draws the filtered frame, the original, or both: views 0 filtered, 1 split (original
// left of the divider), 2 side by side (original | filtered), 3 difference (|a-b| x gain).
// Frames arrive as planes in R8 textures (Y, U, V; gray: Y only; packed RGB/BGR: one RGB8
// texture). YUV -> RGB is vfpipe's integer conversion with the frame's matrix and range
// (cpu/convert_ops.hpp, coefficients in yuv_a / yuv_b), computed exactly in float: every
// intermediate is an integer below 2^24, so the picture equals the CPU conversion bit for
// bit.
in vec2 uv;
out vec4 color;
uniform sampler2D planes_a[3];  // filtered
uniform sampler2D planes_b[3];  // original
uniform int format_a, format_b; // 0 gray, 1 yuv (420 or 444: the chroma texture's size says), 2 rgb, 3 bgr
uniform float yuv_a[6], yuv_b[6]; // cy, rv, gu, gv, bu, luma offset (conv::YuvMatrix)
uniform int view;
uniform float divider;          // split: x of the divider in 0..1
uniform float diff_gain;

float byte_at(sampler2D t, ivec2 p) { return floor(texelFetch(t, p, 0).r * 255.0 + 0.5); }

// Nearest sample, by integer texel: a 4:2:0 chroma sample covers its 2x2 luma block, as in
// the CPU conversion, for odd sizes too (normalised coordinates would drift there).
vec3 to_rgb(sampler2D planes[3], int format, float k[6], vec2 p) {
  ivec2 size = textureSize(planes[0], 0);
  ivec2 px = clamp(ivec2(p * vec2(size)), ivec2(0), size - 1);
  if (format == 2) return texelFetch(planes[0], px, 0).rgb;
  if (format == 3) return texelFetch(planes[0], px, 0).bgr;
  float y = byte_at(planes[0], px);
  if (format == 0) return vec3(y / 255.0);
  ivec2 cpx = textureSize(planes[1], 0) == size ? px : px / 2;
  float c = y - k[5], d = byte_at(planes[1], cpx) - 128.0, e = byte_at(planes[2], cpx) - 128.0;
  float r = floor((k[0] * c + k[1] * e + 128.0) / 256.0);
  float g = floor((k[0] * c + k[2] * d + k[3] * e + 128.0) / 256.0);
  float b = floor((k[0] * c + k[4] * d + 128.0) / 256.0);
  return clamp(vec3(r, g, b), 0.0, 255.0) / 255.0;
}

void main() {
  vec3 rgb;
  if (view == 1) {
    rgb = uv.x < divider ? to_rgb(planes_b, format_b, yuv_b, uv) : to_rgb(planes_a, format_a, yuv_a, uv);
    if (abs(uv.x - divider) < 0.0015) rgb = vec3(255.0, 217.0, 25.0) / 255.0;  // exact in 8 bits
  } else if (view == 2) {
    rgb = uv.x < 0.5 ? to_rgb(planes_b, format_b, yuv_b, vec2(uv.x * 2.0, uv.y))
                     : to_rgb(planes_a, format_a, yuv_a, vec2(uv.x * 2.0 - 1.0, uv.y));
  } else if (view == 3) {
    rgb = clamp(abs(to_rgb(planes_a, format_a, yuv_a, uv) - to_rgb(planes_b, format_b, yuv_b, uv)) * diff_gain, 0.0, 1.0);
  } else {
    rgb = to_rgb(planes_a, format_a, yuv_a, uv);
  }
  color = vec4(rgb, 1.0);
}
