export async function runScale(_argv: string[]): Promise<void> {
  throw new Error('not yet');
}
