#version 330 core
// Full-window quad for the video: `rect` is the image's place in normalised device
// coordinates (aspect kept, letterboxed), texture coordinates run 0..1 over it.
uniform vec4 rect;  // x0, y0, x1, y1
out vec2 uv;
void main() {
  vec2 corner = vec2(gl_VertexID & 1, gl_VertexID >> 1);  // triangle strip: (0,0) (1,0) (0,1) (1,1)
  uv = vec2(corner.x, 1.0 - corner.y);                    // image rows run top to bottom
  gl_Position = vec4(mix(rect.xy, rect.zw, corner), 0.0, 1.0);
}
